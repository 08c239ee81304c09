// The KafkaJS contender of the side-by-side benchmark, run by the Go driver
// (bench/, "kafkajs-message" and "kafkajs-batch"): argv[2] is the run spec as
// JSON (client, brokers, topic, group, target, handler and window in
// nanoseconds, partitions); it prints one JSON line, the records handled from
// the first record to the stop (target reached or window over), the span in
// seconds and the process's CPU seconds in it.
//
// KafkaJS defaults throughout, except partitionsConsumedConcurrently set to
// the topic's partitions (its documented knob for handling partitions in
// parallel; the default 1 handles one partition at a time). It commits after
// handling by default: eachMessage resolves the offset when the handler
// returns; eachBatch resolves each message's offset after its handler
// (resolveOffset), with a heartbeat per message.
'use strict';
const { Kafka, logLevel } = require('kafkajs');

const spec = JSON.parse(process.argv[2]);
const handlerMs = spec.handler / 1e6;
const windowMs = spec.window / 1e6;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let n = 0;
let start = null;
let cpuStart = null;
let result = null;
let doneResolve;
const done = new Promise((r) => { doneResolve = r; });

function begin() {
  if (start !== null) return;
  start = process.hrtime.bigint();
  cpuStart = process.cpuUsage();
  setTimeout(finish, windowMs).unref();
}
function finish() {
  if (result !== null) return;
  const cpu = process.cpuUsage(cpuStart);
  result = {
    records: n,
    seconds: Number(process.hrtime.bigint() - start) / 1e9,
    cpu_seconds: (cpu.user + cpu.system) / 1e6,
  };
  doneResolve();
}
function handled() {
  n++;
  if (n === spec.target) finish();
}

async function main() {
  const kafka = new Kafka({ clientId: 'bench-kafkajs', brokers: spec.brokers, logLevel: logLevel.NOTHING });
  const consumer = kafka.consumer({ groupId: spec.group });
  await consumer.connect();
  await consumer.subscribe({ topics: [spec.topic], fromBeginning: true });
  const noWait = setTimeout(() => { console.error('kafkajs: no record in 60s'); process.exit(3); }, 60000);
  const run = { partitionsConsumedConcurrently: spec.partitions };
  if (spec.client === 'kafkajs-message') {
    run.eachMessage = async () => {
      if (result !== null) return;
      begin();
      if (handlerMs > 0) await sleep(handlerMs);
      handled();
    };
  } else {
    run.eachBatch = async ({ batch, resolveOffset, heartbeat, isRunning, isStale }) => {
      for (const message of batch.messages) {
        if (result !== null || !isRunning() || isStale()) break;
        begin();
        if (handlerMs > 0) await sleep(handlerMs);
        handled();
        resolveOffset(message.offset);
        await heartbeat();
      }
    };
  }
  await consumer.run(run);
  await done;
  clearTimeout(noWait);
  await consumer.disconnect();
  process.stdout.write(JSON.stringify(result) + '\n');
  process.exit(0);
}

main().catch((err) => { console.error(err); process.exit(1); });
