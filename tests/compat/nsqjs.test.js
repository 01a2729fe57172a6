// Compatibility: the nsqjs client (from the npm registry, pinned by
// package-lock.json) against the real ternd on loopback. Each test uses its
// own topic on one daemon started for the file.
//
// Run: node --test nsqjs.test.js  (TERND=path/to/ternd)
'use strict'

const test = require('node:test')
const assert = require('node:assert')
const nsq = require('nsqjs')
const { startTernd } = require('./ternd')

let daemon
let addr

test.before(async () => {
  daemon = await startTernd()
  addr = `127.0.0.1:${daemon.tcpPort}`
})

test.after(async () => {
  await daemon.stop()
})

let seq = 0
const fresh = (p = 'c') => `${p}${process.pid}_${Date.now()}_${seq++}`

function writer(opts = {}) {
  return new Promise((resolve, reject) => {
    const [host, port] = addr.split(':')
    const w = new nsq.Writer(host, Number(port), opts)
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

function deferPublish(w, topic, msg, ms) {
  return new Promise((resolve, reject) =>
    w.deferPublish(topic, msg, ms, (err) => (err ? reject(err) : resolve()))
  )
}

// A reader that hands each message to onMessage; resolves to the reader
// once it is connected.
function reader(topic, channel, opts, onMessage) {
  return new Promise((resolve, reject) => {
    const r = new nsq.Reader(topic, channel, {
      nsqdTCPAddresses: [addr],
      maxInFlight: 10,
      ...opts,
    })
    r.on('message', onMessage)
    r.on('error', (err) => reject(err))
    r.on('nsqd_connected', () => resolve(r))
    r.connect()
  })
}

function waitFor(cond, ms = 10000) {
  return new Promise((resolve, reject) => {
    const start = Date.now()
    const tick = () => {
      if (cond()) return resolve()
      if (Date.now() - start > ms) return reject(new Error('timed out waiting'))
      setTimeout(tick, 20)
    }
    tick()
  })
}

async function roundTrip(writerOpts, readerOpts) {
  const topic = fresh()
  const w = await writer(writerOpts)
  let r = null
  try {
    const got = []
    r = await reader(topic, 'ch', readerOpts, (m) => {
      got.push(m.body.toString())
      m.finish()
    })
    await publish(w, topic, 'one')
    await publish(w, topic, ['two', 'three'])
    await waitFor(() => got.length === 3)
    assert.deepStrictEqual(got.sort(), ['one', 'three', 'two'])
  } finally {
    if (r) r.close()
    w.close()
  }
}

test('publish and consume, single and multiple', async () => {
  await roundTrip({}, {})
})

test('snappy', async () => {
  await roundTrip({ snappy: true }, { snappy: true })
})

test('deflate', async () => {
  await roundTrip({ deflate: true, deflateLevel: 3 }, { deflate: true, deflateLevel: 3 })
})

test('requeue redelivers with a higher attempt count', async () => {
  const topic = fresh()
  const w = await writer()
  const attempts = []
  const r = await reader(topic, 'ch', {}, (m) => {
    attempts.push(m.attempts)
    if (m.attempts === 1) m.requeue(100, false)
    else m.finish()
  })
  await publish(w, topic, 'again')
  await waitFor(() => attempts.length === 2)
  assert.deepStrictEqual(attempts, [1, 2])
  r.close()
  w.close()
})

test('touch keeps a message in flight past its timeout', async () => {
  const topic = fresh()
  const w = await writer()
  const seen = []
  const r = await reader(topic, 'ch', { messageTimeout: 1000 }, (m) => {
    seen.push(m.attempts)
    // Touch every 400 ms for 2 s, then finish: no redelivery happens.
    const iv = setInterval(() => m.touch(), 400)
    setTimeout(() => {
      clearInterval(iv)
      m.finish()
    }, 2000)
  })
  await publish(w, topic, 'slow')
  await new Promise((res) => setTimeout(res, 2600))
  assert.deepStrictEqual(seen, [1])
  r.close()
  w.close()
})

test('deferred publish arrives after its delay', async () => {
  const topic = fresh()
  const w = await writer()
  let at = 0
  const r = await reader(topic, 'ch', {}, (m) => {
    at = Date.now()
    m.finish()
  })
  const start = Date.now()
  await deferPublish(w, topic, ['later'], 600)
  await waitFor(() => at !== 0)
  assert.ok(at - start >= 600, `arrived after ${at - start} ms`)
  r.close()
  w.close()
})

test('TLS, and TLS with snappy', async (t) => {
  const { execFileSync } = require('node:child_process')
  const fs = require('node:fs')
  const os = require('node:os')
  const path = require('node:path')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tern-compat-tls-'))
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-days', '2',
    '-subj', '/CN=127.0.0.1', '-keyout', `${dir}/key.pem`, '-out', `${dir}/cert.pem`],
  { stdio: 'ignore' })
  const tls = await startTernd([`--tls-cert=${dir}/cert.pem`, `--tls-key=${dir}/key.pem`])
  const saved = addr
  addr = `127.0.0.1:${tls.tcpPort}`
  try {
    await roundTrip({ tls: true, tlsVerification: false }, { tls: true, tlsVerification: false })
    await roundTrip({ tls: true, tlsVerification: false, snappy: true },
      { tls: true, tlsVerification: false, snappy: true })
  } finally {
    addr = saved
    await tls.stop()
    fs.rmSync(dir, { recursive: true, force: true })
  }
})

test('AUTH through an nsqauthd-style server', async () => {
  const http = require('node:http')
  const seen = []
  const authd = http.createServer((req, res) => {
    const u = new URL(req.url, 'http://x')
    seen.push(u.searchParams.get('auth_secret'))
    if (u.searchParams.get('auth_secret') !== 'opensesame') {
      res.writeHead(403).end()
      return
    }
    res.writeHead(200, { 'Content-Type': 'application/json' }).end(JSON.stringify({
      ttl: 60, identity: 'compat', identity_url: '',
      authorizations: [{ topic: '.*', channels: ['.*'], permissions: ['publish', 'subscribe'] }],
    }))
  })
  await new Promise((res) => authd.listen(0, '127.0.0.1', res))
  const secured = await startTernd([`--auth-http-address=127.0.0.1:${authd.address().port}`])
  const saved = addr
  addr = `127.0.0.1:${secured.tcpPort}`
  try {
    await roundTrip({ authSecret: 'opensesame' }, { authSecret: 'opensesame' })
    assert.ok(seen.includes('opensesame'))
  } finally {
    addr = saved
    await secured.stop()
    authd.close()
  }
})

test('consumers discover ternd through its lookupd endpoints', async () => {
  const node = await startTernd(['--broadcast-address=127.0.0.1'])
  const topic = fresh('lk')
  let w = null
  let r = null
  try {
    w = await new Promise((resolve, reject) => {
      const x = new nsq.Writer('127.0.0.1', node.tcpPort)
      x.on('ready', () => resolve(x))
      x.on('error', reject)
      x.connect()
    })
    await publish(w, topic, 'found me')
    const got = []
    r = new nsq.Reader(topic, 'ch', {
      lookupdHTTPAddresses: [`127.0.0.1:${node.httpPort}`],
      lookupdPollInterval: 1,
    })
    r.on('message', (m) => {
      got.push(m.body.toString())
      m.finish()
    })
    r.on('error', () => {})
    r.connect()
    await waitFor(() => got.length === 1)
    assert.deepStrictEqual(got, ['found me'])
  } finally {
    // Close the clients even when the test failed, or their timers keep
    // the runner alive.
    if (r) r.close()
    if (w) w.close()
    await node.stop()
  }
})

test('a bad topic name is refused', async () => {
  const w = await writer()
  await assert.rejects(publish(w, 'bad/topic', 'x'))
  w.close()
})
