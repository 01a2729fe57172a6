// Compatibility in a cluster: the nsqjs client against 3 real ternd nodes
// on loopback. Writers publish to each node's NSQ TCP port (each node
// takes its own share: the topic grows a partition there); one Reader,
// told only one node's lookupd address, finds every owner through /lookup
// and receives every message, as it would from a fleet of nsqd behind
// nsqlookupd.
//
// Run: node --test nsqjs.cluster.test.js  (TERND=path/to/ternd)
'use strict'

const test = require('node:test')
const assert = require('node:assert')
const nsq = require('nsqjs')
const { startCluster, get } = require('./ternd')

let nodes

test.before(async () => {
  nodes = await startCluster(3)
})

test.after(async () => {
  if (nodes) await nodes.stopAll()
})

function writer(port) {
  return new Promise((resolve, reject) => {
    const w = new nsq.Writer('127.0.0.1', port)
    w.on('ready', () => resolve(w))
    w.on('error', reject)
    w.connect()
  })
}

function publish(w, topic, msgs) {
  return new Promise((resolve, reject) =>
    w.publish(topic, msgs, (err) => (err ? reject(err) : resolve()))
  )
}

function waitFor(cond, ms, what) {
  return new Promise((resolve, reject) => {
    const start = Date.now()
    const tick = async () => {
      if (await cond()) return resolve()
      if (Date.now() - start > ms) return reject(new Error(`timed out waiting for ${what}`))
      setTimeout(tick, 100)
    }
    tick()
  })
}

test('a Reader pointed at one node receives what every node took', async () => {
  const topic = `fleet${process.pid}`
  const writers = []
  let r = null
  try {
    for (const node of nodes) writers.push(await writer(node.tcpPort))
    const sent = []
    // One message through each node first: the topic gets a partition on
    // each, and /lookup on any node then names all three.
    for (const [i, w] of writers.entries()) {
      const body = `first via ${nodes[i].id}`
      await publish(w, topic, body)
      sent.push(body)
    }
    const lookup = async () => {
      const { status, body } = await get(nodes[0].httpPort, `/lookup?topic=${topic}`)
      return status === 200 ? JSON.parse(body).producers.map((p) => p.tcp_port).sort() : []
    }
    await waitFor(async () => (await lookup()).length === 3, 30000, 'three owners in /lookup')
    assert.deepStrictEqual(await lookup(), nodes.map((n) => n.tcpPort).sort())

    const got = []
    const connected = new Set()
    r = new nsq.Reader(topic, 'ch', {
      lookupdHTTPAddresses: [`127.0.0.1:${nodes[0].httpPort}`],
      lookupdPollInterval: 1,
      maxInFlight: 30,
    })
    r.on('message', (m) => {
      got.push(m.body.toString())
      m.finish()
    })
    r.on('nsqd_connected', (host, port) => connected.add(port))
    r.on('error', () => {})
    r.connect()
    await waitFor(() => connected.size === 3, 30000, 'the Reader connected to all three nodes')
    assert.deepStrictEqual([...connected].sort(), nodes.map((n) => n.tcpPort).sort())
    // More while it reads: single and multiple publishes on every node.
    for (const [i, w] of writers.entries()) {
      for (let k = 0; k < 5; k++) {
        const body = `${k} via ${nodes[i].id}`
        await publish(w, topic, body)
        sent.push(body)
      }
      const batch = [0, 1, 2].map((k) => `batch ${k} via ${nodes[i].id}`)
      await publish(w, topic, batch)
      sent.push(...batch)
    }
    await waitFor(() => got.length >= sent.length, 30000,
      `all ${sent.length} messages (got ${got.length})`)
    assert.deepStrictEqual([...got].sort(), [...sent].sort())
  } finally {
    if (r) r.close()
    for (const w of writers) w.close()
  }
})
