'use strict'
// A shop's checkout in Node.js, the way the KafkaJS tutorials write it:
// it publishes orderCreated as plain JSON (no registry), keyed by the
// customer id (the order id for a guest), with acks=all on an idempotent
// producer. Ordercast's orders, payments and notifications services decode
// plain JSON that fits schema/json/orderCreated.json as well as Avro.
//
//   KAFKA_BROKERS=127.0.0.1:9092 ORDERS=5 node producer.js
//
// Environment: KAFKA_BROKERS (comma separated, default 127.0.0.1:9092),
// ORDERS (how many, default 5), ID_PREFIX (order/event id prefix, default
// "node"), CUSTOMERS (comma separated customer ids cycled over; an empty
// entry places a guest order; default "17850,13047,,12583").
// Prints one JSON line per acknowledged order on stdout:
//   {"orderId":"node-ord-1","eventId":"node-evt-1","key":"17850","totalMilli":15300,"partition":3,"offset":"12"}
const { Kafka, Partitioners, logLevel } = require('kafkajs')

const brokers = (process.env.KAFKA_BROKERS || '127.0.0.1:9092').split(',').map((s) => s.trim()).filter(Boolean)
const count = Number(process.env.ORDERS || 5)
const prefix = process.env.ID_PREFIX || 'node'
const customers = (process.env.CUSTOMERS ?? '17850,13047,,12583').split(',').map((s) => s.trim())

// A few real products of the Online Retail catalog, priced in thousandths of GBP.
const products = [
  { stockCode: '85123A', description: 'WHITE HANGING HEART T-LIGHT HOLDER', unitPriceMilli: 2550 },
  { stockCode: '71053', description: 'WHITE METAL LANTERN', unitPriceMilli: 3390 },
  { stockCode: '84406B', description: 'CREAM CUPID HEARTS COAT HANGER', unitPriceMilli: 2750 },
  { stockCode: '22752', description: 'SET 7 BABUSHKA NESTING BOXES', unitPriceMilli: 7650 },
]

function orderCreated (i) {
  const customerId = customers[i % customers.length] || null
  const lines = [products[i % products.length], products[(i + 1) % products.length]].map((p, j) => {
    const quantity = 1 + ((i + j) % 4)
    return { ...p, quantity, lineTotalMilli: p.unitPriceMilli * quantity }
  })
  return {
    eventId: `${prefix}-evt-${i + 1}`,
    orderId: `${prefix}-ord-${i + 1}`,
    customerId,
    country: 'United Kingdom',
    lines,
    totalMilli: lines.reduce((s, l) => s + l.lineTotalMilli, 0),
    createdAt: new Date().toISOString(),
    reference: `node-${i + 1}`,
  }
}

async function main () {
  const kafka = new Kafka({ clientId: 'node-shop', brokers, logLevel: logLevel.WARN })
  // The Java client's partitioner (murmur2 of the key), as franz-go's
  // default: a customer's orders land on the same partition whoever sends them.
  const producer = kafka.producer({ idempotent: true, maxInFlightRequests: 1, createPartitioner: Partitioners.DefaultPartitioner })
  await producer.connect()
  try {
    for (let i = 0; i < count; i++) {
      const ev = orderCreated(i)
      const key = ev.customerId || ev.orderId
      const [meta] = await producer.send({
        topic: 'orderCreated',
        acks: -1,
        messages: [{ key, value: JSON.stringify(ev), headers: { 'content-type': 'application/json' } }],
      })
      console.log(JSON.stringify({ orderId: ev.orderId, eventId: ev.eventId, key, totalMilli: ev.totalMilli, partition: meta.partition, offset: meta.baseOffset }))
    }
  } finally {
    await producer.disconnect()
  }
}

main().catch((err) => {
  console.error(`producer: ${err.stack || err}`)
  process.exit(1)
})
