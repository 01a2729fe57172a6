// Start the real ternd for a compatibility test: a temporary data
// directory, the NSQ listener on 127.0.0.1 port 0 (the port is read from
// the daemon's log), stopped with SIGTERM and required to exit cleanly;
// or a cluster of such nodes (startCluster).
'use strict'

const { spawn } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

// opts.args replaces the default listener and data arguments (a cluster
// node gives its own).
function startTernd(extraArgs = [], opts = {}) {
  const bin = process.env.TERND
  if (!bin) throw new Error('set TERND to the ternd binary')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tern-compat-'))
  const args = opts.args || [`--data-path=${dir}/data`, '--tcp-address=127.0.0.1:0',
    '--http-address=127.0.0.1:0', '--raft-address=127.0.0.1:0']
  const proc = spawn(bin, [...args, ...extraArgs], {
    stdio: ['ignore', 'ignore', 'pipe'],
  })
  let log = ''
  return new Promise((resolve, reject) => {
    let tcpPort = 0
    let httpPort = 0
    const timer = setTimeout(() => reject(new Error(`ternd did not start:\n${log}`)), 30000)
    proc.stderr.on('data', (chunk) => {
      log += chunk
      const m = /NSQ TCP listening on port (\d+)/.exec(log)
      if (m) tcpPort = Number(m[1])
      const h = /HTTP listening on port (\d+)/.exec(log)
      if (h) httpPort = Number(h[1])
      if (tcpPort && /ready/.test(log)) {
        clearTimeout(timer)
        resolve({
          tcpPort,
          httpPort,
          pid: proc.pid, // for SIGSTOP / SIGCONT by process id
          log: () => log,
          stop: () =>
            new Promise((res, rej) => {
              proc.on('exit', (code) => {
                fs.rmSync(dir, { recursive: true, force: true })
                if (code === 0) res()
                else rej(new Error(`ternd exited ${code}:\n${log}`))
              })
              proc.kill('SIGTERM')
            }),
        })
      }
    })
    proc.on('exit', (code) => {
      clearTimeout(timer)
      reject(new Error(`ternd exited ${code}:\n${log}`))
    })
  })
}

// A port claimed for this process across test processes, the way
// tests/cluster/harness.py claims them (a file per port under
// $TMPDIR/tern-test-ports holding the owner's pid; one whose pid is gone is
// stale): false when a live process holds it.
function claimPort(port) {
  const dir = path.join(os.tmpdir(), 'tern-test-ports')
  fs.mkdirSync(dir, { recursive: true })
  const file = path.join(dir, String(port))
  for (let i = 0; i < 2; i++) {
    try {
      fs.writeFileSync(file, String(process.pid), { flag: 'wx', mode: 0o644 })
      return true
    } catch (e) {
      if (e.code !== 'EEXIST') throw e
    }
    try {
      const pid = Number(fs.readFileSync(file, 'utf8').trim()) || 0
      if (pid > 0) {
        process.kill(pid, 0) // throws ESRCH once its owner is gone
        return pid === process.pid
      }
    } catch (e) {
      if (e.code === 'EPERM') return false
    }
    try { fs.unlinkSync(file) } catch (_) { /* gone already */ } // stale: its owner is gone
  }
  return false
}

// A free port below 32768 (tests stay out of the ephemeral range), free on
// 127.0.0.1 over TCP and UDP: node RPC shares the HTTP port number over UDP;
// claimed (claimPort) so that no other test process takes it meanwhile.
const usedPorts = new Set()
async function freePort() {
  const net = require('node:net')
  const dgram = require('node:dgram')
  const tryTcp = (port) => new Promise((res) => {
    const s = net.createServer()
    s.once('error', () => res(false))
    s.listen(port, '127.0.0.1', () => s.close(() => res(true)))
  })
  const tryUdp = (port) => new Promise((res) => {
    const s = dgram.createSocket('udp4')
    s.once('error', () => { s.close(); res(false) })
    s.bind(port, '127.0.0.1', () => s.close(() => res(true)))
  })
  for (let i = 0; i < 2000; i++) {
    const port = 20000 + Math.floor(Math.random() * 12768)
    if (usedPorts.has(port)) continue
    if ((await tryTcp(port)) && (await tryUdp(port)) && claimPort(port)) {
      usedPorts.add(port)
      return port
    }
  }
  throw new Error('no free port below 32768')
}

function get(port, path) {
  const http = require('node:http')
  return new Promise((resolve) => {
    const req = http.get({ host: '127.0.0.1', port, path, timeout: 5000 }, (res) => {
      let body = ''
      res.on('data', (c) => { body += c })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', () => resolve({ status: 0, body: '' }))
    req.on('timeout', () => req.destroy())
  })
}

// n ternd nodes forming one cluster on loopback (fixed HTTP and Raft ports,
// the same --peers and cluster secret file, NSQ TCP on port 0), each
// resolved once /readyz answers 200: [{ id, tcpPort, httpPort, log, stop }].
async function startCluster(n, extraArgs = []) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tern-compat-cluster-'))
  const secret = path.join(dir, 'secret')
  fs.writeFileSync(secret, require('node:crypto').randomBytes(32).toString('hex') + '\n',
    { mode: 0o600 })
  const specs = []
  for (let id = 1; id <= n; id++) specs.push({ id, http: await freePort(), raft: await freePort() })
  const peers = specs.map((s) => `${s.id}@127.0.0.1:${s.raft}`).join(',')
  const nodes = []
  try {
    for (const s of specs) {
      nodes.push(await startTernd(extraArgs, { args: [`--node-id=${s.id}`, `--peers=${peers}`,
        `--raft-address=127.0.0.1:${s.raft}`, `--http-address=127.0.0.1:${s.http}`,
        '--tcp-address=127.0.0.1:0', `--cluster-secret-file=${secret}`,
        `--data-path=${dir}/node${s.id}`] }))
      nodes[nodes.length - 1].id = s.id
    }
    const deadline = Date.now() + 90000
    for (const node of nodes) {
      while ((await get(node.httpPort, '/readyz')).status !== 200) {
        if (Date.now() > deadline) throw new Error(`node ${node.id} not ready:\n${node.log()}`)
        await new Promise((res) => setTimeout(res, 200))
      }
    }
  } catch (err) {
    await Promise.allSettled(nodes.map((x) => x.stop()))
    fs.rmSync(dir, { recursive: true, force: true })
    throw err
  }
  nodes.stopAll = async () => {
    try {
      await Promise.all(nodes.map((x) => x.stop()))
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  }
  return nodes
}

module.exports = { startTernd, startCluster, get }
