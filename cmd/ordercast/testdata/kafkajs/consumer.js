'use strict'
// A downstream service in Node.js: its own consumer group on orderCreated
// (or TOPIC), from the beginning, read_committed (the KafkaJS default).
// Values in the Confluent wire format (magic byte 0 + schema id: what
// Ordercast's checkout produces) are decoded with the schema registry
// (@kafkajs/confluent-schema-registry, Avro); plain JSON values with
// JSON.parse.
//
//   KAFKA_BROKERS=127.0.0.1:9092 SCHEMA_REGISTRY_URL=http://127.0.0.1:8081 WANT=10 node consumer.js
//
// Environment: KAFKA_BROKERS, SCHEMA_REGISTRY_URL (needed for Avro
// values), TOPIC (default orderCreated), GROUP (default node-analytics),
// WANT (stop after this many records, default 1), TIMEOUT_MS (give up,
// exit 1, default 60000), RUN_MS (instead of WANT: consume for this long,
// then leave the group and exit 0; for a group shared with other members:
// KafkaJS offers its RoundRobinAssigner). Prints one JSON line per record on stdout:
//   {"topic":"orderCreated","partition":1,"offset":"4","key":"17850","format":"avro","schemaId":1,"eventId":"...","orderId":"...","customerId":"17850","totalMilli":15300,"lines":2}
const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs')
const SnappyCodec = require('kafkajs-snappy')
const { SchemaRegistry } = require('@kafkajs/confluent-schema-registry')

// Ordercast's producers compress batches with snappy (franz-go's default);
// KafkaJS reads only gzip by itself, the other codecs are plug-ins.
CompressionCodecs[CompressionTypes.Snappy] = SnappyCodec

const brokers = (process.env.KAFKA_BROKERS || '127.0.0.1:9092').split(',').map((s) => s.trim()).filter(Boolean)
const topic = process.env.TOPIC || 'orderCreated'
const groupId = process.env.GROUP || 'node-analytics'
const want = Number(process.env.WANT || 1)
const timeoutMs = Number(process.env.TIMEOUT_MS || 60000)
const runMs = Number(process.env.RUN_MS || 0)
const registry = process.env.SCHEMA_REGISTRY_URL ? new SchemaRegistry({ host: process.env.SCHEMA_REGISTRY_URL }) : null

// decode never throws: a record it cannot read is reported as
// "undecodable" and skipped, so one poison pill does not stop the
// partition (a real service would send it to its dead-letter topic).
async function decode (value) {
  try {
    if (value && value.length > 5 && value[0] === 0) {
      if (!registry) throw new Error('an Avro (wire format) value but no SCHEMA_REGISTRY_URL')
      return { format: 'avro', schemaId: value.readUInt32BE(1), ev: await registry.decode(value) }
    }
    return { format: 'json', ev: JSON.parse(value.toString('utf8')) }
  } catch (err) {
    return { format: 'undecodable', error: String(err.message || err), ev: {} }
  }
}

async function main () {
  const kafka = new Kafka({ clientId: `node-${groupId}`, brokers, logLevel: logLevel.WARN })
  const consumer = kafka.consumer({ groupId })
  let seen = 0
  let finish
  const done = new Promise((resolve) => { finish = resolve })
  const timer = runMs > 0
    ? setTimeout(() => finish(null), runMs)
    : setTimeout(() => finish(new Error(`read ${seen} of ${want} records of ${topic} in ${timeoutMs} ms`)), timeoutMs)
  consumer.on(consumer.events.CRASH, ({ payload }) => { if (!payload.restart) finish(payload.error) })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ topic, partition, message }) => {
      const { format, schemaId, error, ev } = await decode(message.value)
      console.log(JSON.stringify({
        topic,
        partition,
        offset: message.offset,
        key: message.key && message.key.toString(),
        format,
        schemaId,
        error,
        eventId: ev.eventId,
        orderId: ev.orderId,
        customerId: ev.customerId ?? null,
        totalMilli: ev.totalMilli === undefined ? undefined : Number(ev.totalMilli),
        lines: Array.isArray(ev.lines) ? ev.lines.length : undefined,
      }))
      if (++seen >= want && runMs === 0) finish(null)
    },
  })
  const err = await done
  clearTimeout(timer)
  await consumer.disconnect() // commits, leaves the group
  if (err) throw err
}

main().catch((err) => {
  console.error(`consumer: ${err.stack || err}`)
  process.exit(1)
})
