// Start the real ternd for a compatibility test: a temporary data
// directory, the NSQ listener on 127.0.0.1 port 0 (the port is read from
// the daemon's log), stopped with SIGTERM and required to exit cleanly.
'use strict'

const { spawn } = require('node:child_process')
const fs = require('node:fs')
const os = require('node:os')
const path = require('node:path')

function startTernd(extraArgs = []) {
  const bin = process.env.TERND
  if (!bin) throw new Error('set TERND to the ternd binary')
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tern-compat-'))
  const args = [`--data-path=${dir}/data`, '--tcp-address=127.0.0.1:0', '--http-address=127.0.0.1:0',
    '--raft-address=127.0.0.1:0']
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

module.exports = { startTernd }
