// The web console in a real browser: Debian's chromium, headless, driven by
// playwright-core (pinned by package-lock.json) against one real ternd.
//
// Logs in with the keyboard, creates a topic, publishes through nsqd's /pub,
// watches the channel's depth change, sees a replicated topic's view (the
// record answered as a cluster would: leaders, ISR, badges), peeks (bodies appear only then),
// pauses and empties the channel, takes screenshots at 1280 px and at phone
// width (and dark) and checks they are not blank; a user with only a consume
// grant is offered no action but peek; the admin grants that user more,
// sees the cluster, deletes the topic; a password change sends the open
// console back to its login page (401); once the daemon is stopped the page
// shows the unreachable banner.
//
// The moves view against three real ternd nodes (a second test): a
// replicated topic; a move whose new member is frozen (SIGSTOP) stays
// catching_up (with the bytes copied when the API gives them) and is
// aborted from its Abort button ("aborted", with who aborted it); a second one, aborted through the API while its Abort
// dialog is open, shows the API's 409 when the button is confirmed; a move
// begun from the "Move partition" form runs to "done"; a member
// decommissioned from its button drains to "decommissioned", and the mark
// is cleared again.
'use strict'

const test = require('node:test')
const assert = require('node:assert/strict')
const fs = require('node:fs')
const http = require('node:http')
const os = require('node:os')
const path = require('node:path')
const zlib = require('node:zlib')
const { chromium } = require('playwright-core')
const { startTernd, startCluster } = require('../compat/ternd.js')

const PASSWORD = 'console-test-pw'
const TOPIC = 'console-t'
// Screenshots go here (kept with KEEP_SHOTS=1, else removed after a pass).
const SHOTS = fs.mkdtempSync(path.join(os.tmpdir(), 'tern-console-shots-'))

// The Chromium binary: $CHROMIUM, else Debian's (the real one behind the
// /usr/bin/chromium wrapper script).
function chromiumPath() {
  const candidates = [process.env.CHROMIUM, '/usr/lib/chromium/chromium', '/usr/bin/chromium']
  const found = candidates.find((p) => p && fs.existsSync(p))
  if (!found) throw new Error('no chromium: install Debian\'s chromium (scripts/install-deps.sh)')
  return found
}

function request(port, method, p, { body, auth, headers } = {}) {
  return new Promise((resolve, reject) => {
    const h = { ...(headers || {}) }
    if (auth) h.Authorization = 'Basic ' + Buffer.from(auth).toString('base64')
    if (body !== undefined) h['Content-Length'] = Buffer.byteLength(body)
    const req = http.request({ host: '127.0.0.1', port, method, path: p, headers: h, timeout: 10000 }, (res) => {
      let text = ''
      res.on('data', (c) => { text += c })
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }))
    })
    req.on('error', reject)
    req.on('timeout', () => req.destroy(new Error(`${method} ${p}: timeout`)))
    if (body !== undefined) req.write(body)
    req.end()
  })
}

// Decode an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes for
// screenshots) into {width, height, channels, pixels}.
function decodePng(buf) {
  assert.equal(buf.subarray(0, 8).toString('hex'), '89504e470d0a1a0a', 'not a PNG')
  let off = 8
  let ihdr = null
  const idat = []
  while (off < buf.length) {
    const len = buf.readUInt32BE(off)
    const type = buf.toString('ascii', off + 4, off + 8)
    const data = buf.subarray(off + 8, off + 8 + len)
    if (type === 'IHDR') {
      ihdr = { width: data.readUInt32BE(0), height: data.readUInt32BE(4), depth: data[8], type: data[9], interlace: data[12] }
    } else if (type === 'IDAT') {
      idat.push(data)
    } else if (type === 'IEND') {
      break
    }
    off += 12 + len
  }
  assert.ok(ihdr, 'PNG without IHDR')
  assert.equal(ihdr.depth, 8, 'PNG bit depth')
  assert.ok(ihdr.type === 2 || ihdr.type === 6, `PNG colour type ${ihdr.type}`)
  assert.equal(ihdr.interlace, 0, 'interlaced PNG')
  const bpp = ihdr.type === 6 ? 4 : 3
  const stride = ihdr.width * bpp
  const raw = zlib.inflateSync(Buffer.concat(idat))
  assert.equal(raw.length, ihdr.height * (stride + 1), 'PNG data length')
  const out = Buffer.alloc(ihdr.height * stride)
  for (let y = 0; y < ihdr.height; y++) {
    const filter = raw[y * (stride + 1)]
    const line = raw.subarray(y * (stride + 1) + 1, (y + 1) * (stride + 1))
    const cur = out.subarray(y * stride, (y + 1) * stride)
    const prev = y > 0 ? out.subarray((y - 1) * stride, y * stride) : Buffer.alloc(stride)
    for (let x = 0; x < stride; x++) {
      const a = x >= bpp ? cur[x - bpp] : 0
      const b = prev[x]
      const c = x >= bpp ? prev[x - bpp] : 0
      let v
      switch (filter) {
        case 0: v = line[x]; break
        case 1: v = line[x] + a; break
        case 2: v = line[x] + b; break
        case 3: v = line[x] + ((a + b) >> 1); break
        case 4: {
          const p = a + b - c
          const pa = Math.abs(p - a)
          const pb = Math.abs(p - b)
          const pc = Math.abs(p - c)
          v = line[x] + (pa <= pb && pa <= pc ? a : pb <= pc ? b : c)
          break
        }
        default: throw new Error(`PNG filter ${filter}`)
      }
      cur[x] = v & 0xff
    }
  }
  return { width: ihdr.width, height: ihdr.height, channels: bpp, pixels: out }
}

// A screenshot that shows something: many colours, none covering almost
// everything (a blank or error-less white page is one colour).
async function assertNotBlank(page, name, width) {
  const file = path.join(SHOTS, name + '.png')
  const png = decodePng(await page.screenshot({ path: file, fullPage: false }))
  assert.equal(png.width, width, `${name}: screenshot width`)
  const counts = new Map()
  for (let i = 0; i < png.pixels.length; i += png.channels) {
    const rgb = (png.pixels[i] << 16) | (png.pixels[i + 1] << 8) | png.pixels[i + 2]
    counts.set(rgb, (counts.get(rgb) || 0) + 1)
  }
  const total = png.width * png.height
  const top = Math.max(...counts.values())
  assert.ok(counts.size >= 32, `${name}: only ${counts.size} colours (${file})`)
  assert.ok(top / total < 0.97, `${name}: one colour covers ${(100 * top / total).toFixed(1)}% (${file})`)
  return png
}

// The text of a channel's cell in the topic page (data-col: depth, lag).
function channelCell(page, channel, col) {
  return page.locator(`tr[data-channel="${channel}"] td[data-col="${col}"]`)
}

async function waitText(locator, text, timeout = 15000) {
  const deadline = Date.now() + timeout
  let last = ''
  while (Date.now() < deadline) {
    last = (await locator.count()) ? await locator.first().innerText() : '(absent)'
    if (last.trim() === text) return
    await new Promise((r) => setTimeout(r, 200))
  }
  assert.fail(`expected ${JSON.stringify(text)}, still ${JSON.stringify(last)}`)
}

async function confirm(page, expectTitle) {
  const dialog = page.locator('#confirm')
  await dialog.waitFor({ state: 'visible' })
  assert.equal(await page.locator('#confirm-title').innerText(), expectTitle)
  await page.click('#confirm-ok')
  await dialog.waitFor({ state: 'hidden' })
}

async function login(page, user, password) {
  await page.locator('#login-user').waitFor({ state: 'visible' })
  await page.fill('#login-user', '')
  await page.focus('#login-user')
  await page.keyboard.type(user)
  await page.keyboard.press('Tab')
  await page.keyboard.type(password)
  await page.keyboard.press('Enter')
  await page.locator('#nav').waitFor({ state: 'visible' })
}

test('the web console in headless chromium', { timeout: 120000 }, async (t) => {
  process.env.TERN_ADMIN_PASSWORD = PASSWORD
  const d = await startTernd()
  let stopped = false
  const base = `http://127.0.0.1:${d.httpPort}`
  const admin = `admin:${PASSWORD}`
  const args = []
  if (process.getuid && process.getuid() === 0) args.push('--no-sandbox') // CI runs as root
  const browser = await chromium.launch({ executablePath: chromiumPath(), headless: true, args })
  const errors = []
  try {
    for (let i = 0; ; i++) {
      if ((await request(d.httpPort, 'GET', '/readyz')).status === 200) break
      assert.ok(i < 100, 'ternd never became ready')
      await new Promise((r) => setTimeout(r, 100))
    }
    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
    const page = await context.newPage()
    page.on('pageerror', (e) => errors.push(String(e)))
    page.on('console', (m) => { if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) errors.push(m.text()) })

    // The page and its headers; the login form first.
    const res = await page.goto(base + '/console/')
    assert.equal(res.status(), 200)
    assert.match(res.headers()['content-security-policy'], /default-src 'self'/)
    assert.match(res.headers()['content-security-policy'], /frame-ancestors 'none'/)
    await page.locator('#login').waitFor({ state: 'visible' })
    await assertNotBlank(page, 'login-1280', 1280)

    // Wrong password: stays on the login page with a message.
    await page.fill('#login-user', 'admin')
    await page.fill('#login-password', 'wrong')
    await page.click('#login button[type=submit]')
    await page.locator('#login-error').waitFor({ state: 'visible' })
    assert.match(await page.locator('#login-error').innerText(), /wrong user name or password/i)

    await login(page, 'admin', PASSWORD)
    assert.equal(await page.evaluate(() => Object.keys(sessionStorage).length), 1)
    assert.equal(await page.evaluate(() => Object.keys(localStorage).length), 0)
    await page.locator('text=Readiness (/readyz)').waitFor()
    await page.locator('.card .status-ok').first().waitFor()
    await assertNotBlank(page, 'overview-1280', 1280)

    // Create a topic through the dialog and its confirmation.
    await page.click('#nav a[data-view=topics]')
    await page.click('#create-open')
    await page.fill('#create-name', TOPIC)
    await page.fill('#create-partitions', '1')
    await page.click('#create-ok')
    await confirm(page, 'Create a topic')
    await page.locator(`a[href="#/topics/${TOPIC}"]`).waitFor()

    await page.click(`a[href="#/topics/${TOPIC}"]`)
    await waitText(channelCell(page, 'default', 'depth'), '0')

    // Publish through nsqd's /pub (the topic has an owner: credentials).
    for (let i = 0; i < 3; i++) {
      const r = await request(d.httpPort, 'POST', `/pub?topic=${TOPIC}`, { body: `hello ${i}`, auth: admin })
      assert.equal(r.status, 200, r.text)
    }
    await waitText(channelCell(page, 'default', 'depth'), '3')
    await waitText(channelCell(page, 'default', 'lag'), '3')
    assert.ok(!(await page.content()).includes('hello 0'), 'a body shown before peek')
    await assertNotBlank(page, 'topic-1280', 1280)
    // A factor-1 topic says so, and its partitions show their owner.
    await waitText(page.locator('#topic-replication'), 'none (factor 1: one owner per partition)')

    // A replicated topic's view: this lone node has none, so the topic's
    // record is answered as a 3-node cluster would (replication fields of
    // docs/api.md) and the view shows the factor, each partition's leader,
    // replicas, ISR and epoch, and the under-replicated / offline /
    // unclean / damaged / append-error badges.
    await page.route(`**/v1/topics/${TOPIC}`, async (route) => {
      const resp = await route.fetch()
      const j = await resp.json()
      j.replication_factor = 3
      j.min_insync_replicas = 2
      j.partition_stats = [
        { ...j.partition_stats[0], index: 0, leader: '1', replicas: ['1', '2', '3'], isr: ['1', '2'], leader_epoch: 4, under_replicated: true, offline: false, unclean: false, damaged: ['3'], replica_errors: { 3: 'no space left on device' } },
        { index: 1, owner_node: null, leader: null, replicas: ['2', '3', '1'], isr: ['2'], leader_epoch: 7, under_replicated: true, offline: true, unclean: true },
      ]
      await route.fulfill({ response: resp, json: j })
    })
    await waitText(page.locator('#topic-replication'), 'factor 3, at least 2 in sync to write 1 under-replicated 1 offline')
    const row0 = page.locator('tr[data-partition="0"]')
    assert.equal(await row0.locator('[data-col=leader]').innerText(), '1')
    assert.equal(await row0.locator('[data-col=replicas]').innerText(), '1, 2, 3')
    assert.equal(await row0.locator('[data-col=isr]').innerText(), '1, 2')
    await row0.locator('.badge.under-replicated').waitFor()
    assert.equal(await row0.locator('.badge.damaged').innerText(), 'damaged on 3')
    assert.equal(await row0.locator('.badge.append-error').innerText(), 'member 3: no space left on device')
    const row1 = page.locator('tr[data-partition="1"]')
    assert.equal(await row1.locator('[data-col=leader]').innerText(), 'none')
    await row1.locator('.badge.offline').waitFor()
    await row1.locator('.badge.unclean').waitFor()
    assert.equal(await row1.locator('.badge.damaged, .badge.append-error').count(), 0)
    await assertNotBlank(page, 'topic-replicated-1280', 1280)
    await page.unroute(`**/v1/topics/${TOPIC}`)
    await waitText(page.locator('#topic-replication'), 'none (factor 1: one owner per partition)')

    // Peek: the bodies appear in the dialog, read without a lease.
    await page.click('#peek-open')
    await page.locator('#peek-body pre').first().waitFor()
    assert.equal(await page.locator('#peek-body pre').count(), 3)
    assert.equal(await page.locator('#peek-body pre').first().innerText(), 'hello 0')
    await page.keyboard.press('Escape')
    await page.locator('#peek').waitFor({ state: 'hidden' })
    await waitText(channelCell(page, 'default', 'depth'), '3')

    // The keyboard focus survives the 2 s refreshes of the view.
    await page.focus('button[data-k="cpause-default"]')
    await page.waitForTimeout(2500)
    assert.equal(await page.evaluate(() => document.activeElement.dataset.k), 'cpause-default')

    // Pause, then empty, the channel (each confirmed).
    await page.keyboard.press('Enter')
    await confirm(page, 'Pause the channel')
    await page.locator('tr[data-channel="default"] .badge.paused').waitFor()
    const st = JSON.parse((await request(d.httpPort, 'GET', `/stats?format=json&topic=${TOPIC}`, { auth: admin })).text)
    assert.equal(st.topics[0].channels[0].paused, true)
    await page.click('tr[data-channel="default"] button:has-text("Empty")')
    await confirm(page, 'Empty the channel')
    await waitText(channelCell(page, 'default', 'depth'), '0')
    await page.locator('svg.spark polyline').first().waitFor()

    // Phone width: nothing wider than the window (tables scroll in place).
    await page.setViewportSize({ width: 390, height: 844 })
    await page.waitForTimeout(300)
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth)
    assert.ok(overflow <= 390, `page is ${overflow}px wide at 390`)
    await assertNotBlank(page, 'topic-390', 390)
    await page.emulateMedia({ colorScheme: 'dark' })
    const dark = await page.evaluate(() => getComputedStyle(document.body).backgroundColor)
    assert.equal(dark, 'rgb(17, 20, 24)')
    await assertNotBlank(page, 'topic-390-dark', 390)
    await page.emulateMedia({ colorScheme: 'light' })
    await page.setViewportSize({ width: 1280, height: 800 })

    // A user with a consume grant only: peek, and no action.
    let r = await request(d.httpPort, 'POST', '/v1/users', {
      auth: admin, headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ username: 'viewer', password: 'viewer-pw', grants: [{ action: 'consume', patterns: ['console-*'] }] }),
    })
    assert.equal(r.status, 201, r.text)
    const other = await browser.newContext({ viewport: { width: 1280, height: 800 } })
    const vpage = await other.newPage()
    await vpage.goto(`${base}/console/#/topics/${TOPIC}`)
    await login(vpage, 'viewer', 'viewer-pw')
    await vpage.locator('#peek-open').waitFor()
    await vpage.locator('tr[data-channel="default"]').waitFor()
    for (const label of ['Delete topic', 'Pause topic', 'Pause', 'Empty']) {
      assert.equal(await vpage.locator(`button:text-is("${label}")`).count(), 0, `viewer is offered ${label}`)
    }
    await vpage.click('#nav a[data-view=topics]')
    await vpage.locator(`a[href="#/topics/${TOPIC}"]`).waitFor()
    assert.equal(await vpage.locator('#create-open').count(), 0)
    await other.close()

    // Users: the admin adds a grant through the dialog and its confirmation.
    await page.click('#nav a[data-view=users]')
    await page.click('button[data-k="grant-viewer"]')
    await page.selectOption('#grant-action', 'produce')
    await page.fill('#grant-patterns', 'console-*, other')
    await page.click('#grant-ok')
    await confirm(page, 'Grant')
    await page.locator('li:has-text("produce console-*, other")').waitFor()
    await assertNotBlank(page, 'users-1280', 1280)
    const viewer = JSON.parse((await request(d.httpPort, 'GET', '/v1/users/viewer', { auth: admin })).text)
    assert.deepEqual(viewer.grants, [{ action: 'consume', patterns: ['console-*'] },
      { action: 'produce', patterns: ['console-*', 'other'] }])

    // Cluster: this node is its one member, alive and leader.
    await page.click('#nav a[data-view=cluster]')
    await page.locator('p.caption:text-is("Partition moves under way and recently finished")').waitFor()
    await page.locator('text=No moves under way or recently finished.').waitFor()
    await page.locator('td:has-text("alive")').waitFor()
    await page.locator('.badge:text-is("leader")').waitFor()
    // The leader's last contact with itself: now.
    await page.locator('td > span:text-is("0 ms ago")').waitFor()

    // Delete the topic (confirmed): gone from the list and from /v1.
    await page.goto(`${base}/console/#/topics/${TOPIC}`)
    await page.click('button:text-is("Delete topic")')
    await confirm(page, 'Delete the topic')
    await page.locator('text=No topics yet.').waitFor()
    assert.equal((await request(d.httpPort, 'GET', `/v1/topics/${TOPIC}`, { auth: admin })).status, 404)

    // The password changes: the open console's next call is 401, and it
    // goes back to the login page.
    r = await request(d.httpPort, 'PUT', '/v1/users/admin/password', {
      auth: admin, headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ new_password: PASSWORD + '2', current_password: PASSWORD }),
    })
    assert.equal(r.status, 204, r.text)
    await page.locator('#login').waitFor({ state: 'visible' })
    assert.match(await page.locator('#login-error').innerText(), /401/)
    assert.equal(await page.evaluate(() => Object.keys(sessionStorage).length), 0)
    await login(page, 'admin', PASSWORD + '2')
    await page.click(`#nav a[data-view=topics]`)
    await page.locator('text=No topics yet.').waitFor()

    // The daemon goes away: a visible error, and the last page stays.
    await d.stop()
    stopped = true
    await page.locator('#banner').waitFor({ state: 'visible', timeout: 15000 })
    assert.match(await page.locator('#banner').innerText(), /unreachable/i)
    assert.equal(await page.locator('text=No topics yet.').count(), 1)
    await assertNotBlank(page, 'down-1280', 1280)
    assert.deepEqual(errors, [])
  } finally {
    await browser.close()
    if (!stopped) await d.stop()
  }
  if (process.env.KEEP_SHOTS) console.log(`screenshots in ${SHOTS}`)
  else fs.rmSync(SHOTS, { recursive: true, force: true })
})

// A 503 the API answers before it does anything (Retry-After: 1): this
// node's metastore replica lost contact with the leader for a moment (an
// election after a member was frozen and resumed, a loaded machine).
const NOT_CAUGHT_UP = 'control plane not caught up'

// JSON body of a /v1 call as admin on port (throws on another status);
// sent again after a NOT_CAUGHT_UP 503, as its Retry-After asks.
async function v1(port, method, p, body, want) {
  for (let i = 0; ; i++) {
    const r = await request(port, method, p, {
      auth: `admin:${PASSWORD}`,
      headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    })
    if (r.status === 503 && r.text.includes(NOT_CAUGHT_UP) && i < 60) {
      await new Promise((res) => setTimeout(res, 1000))
      continue
    }
    assert.equal(r.status, want, `${method} ${p}: ${r.status} ${r.text}`)
    return r.text ? JSON.parse(r.text) : null
  }
}

// A console action: start(page) opens its confirmation (titled title),
// which is confirmed; the flash under the header says how it went. Done
// again after the API's NOT_CAUGHT_UP 503 (shown to the user as it is);
// the flash text of the last try.
async function uiAction(page, start, title) {
  for (let i = 0; ; i++) {
    await page.evaluate(() => { document.getElementById('flash').hidden = true })
    await start(page)
    await confirm(page, title)
    const said = await until(`the outcome of "${title}"`, async () => {
      const el = page.locator('#flash')
      return (await el.isVisible()) ? el.innerText() : null
    })
    if (said.includes(`503 ${NOT_CAUGHT_UP}`) && i < 30) {
      await new Promise((res) => setTimeout(res, 1000))
      continue
    }
    return said
  }
}

async function until(what, fn, timeout = 60000) {
  const deadline = Date.now() + timeout
  for (;;) {
    const v = await fn()
    if (v) return v
    assert.ok(Date.now() < deadline, `timed out waiting for ${what}`)
    await new Promise((r) => setTimeout(r, 250))
  }
}

function moveCell(page, id, col) {
  return page.locator(`tr[data-move="${id}"] td[data-col="${col}"]`)
}

test('the moves view against a three-node cluster', { timeout: 240000 }, async () => {
  process.env.TERN_ADMIN_PASSWORD = PASSWORD
  // A long member session: the frozen member stays a valid move target
  // while the test works through the page.
  const nodes = await startCluster(3, ['--cluster-heartbeat-interval=500ms', '--member-session-timeout=60s',
    '--default-replication-factor=2', '--min-insync-replicas=1'])
  const frozen = new Set()
  const args = []
  if (process.getuid && process.getuid() === 0) args.push('--no-sandbox')
  const browser = await chromium.launch({ executablePath: chromiumPath(), headless: true, args })
  const errors = []
  try {
    const port = nodes[0].httpPort // the node the console is served from
    await until('three alive members', async () => {
      const m = await v1(port, 'GET', '/v1/cluster/members', undefined, 200)
      return m.members.filter((x) => x.status === 'alive').length === 3
    })
    await v1(port, 'POST', '/v1/topics', { name: 'mv', partitions: 3, replication_factor: 2, min_insync_replicas: 1 }, 201)
    const layout = await until('every partition of mv led, its ISR whole', async () => {
      const t = await v1(port, 'GET', '/v1/topics/mv', undefined, 200)
      const ps = t.partition_stats || []
      return ps.length === 3 && ps.every((p) => p.leader && (p.isr || []).length === 2) ? ps : null
    })
    for (let i = 0; i < 20; i++) {
      const r = await request(port, 'POST', '/pub?topic=mv', { body: `m${i}`, auth: `admin:${PASSWORD}` })
      assert.equal(r.status, 200, r.text)
    }
    const members = await v1(port, 'GET', '/v1/cluster/members', undefined, 200)
    const metaLeader = members.members.find((x) => x.leader).id
    const ids = nodes.map((n) => String(n.id))
    const spareOf = (p) => ids.find((id) => !p.replicas.includes(id))
    // A partition whose spare member is neither the node serving the page
    // nor the metastore leader: freezing it leaves both answering.
    const p = layout.find((x) => spareOf(x) !== '1' && spareOf(x) !== metaLeader)
    assert.ok(p, `no partition to move onto a member that can be frozen: ${JSON.stringify(layout)}`)
    const spare = spareOf(p)
    const target = [p.leader, spare]
    const victim = nodes.find((n) => String(n.id) === spare)

    const context = await browser.newContext({ viewport: { width: 1280, height: 800 } })
    const page = await context.newPage()
    page.on('pageerror', (e) => errors.push(String(e)))
    page.on('console', (m) => { if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) errors.push(m.text()) })
    await page.goto(`http://127.0.0.1:${port}/console/#/cluster`)
    await login(page, 'admin', PASSWORD)
    await page.locator('text=No moves under way or recently finished.').waitFor()
    // Every member with its replicas held and a Decommission button.
    for (const id of ids) {
      await page.locator(`tr[data-member="${id}"] button:text-is("Decommission")`).waitFor()
      assert.match(await page.locator(`tr[data-member="${id}"] td[data-col=replicas]`).innerText(), /^\d+$/)
    }

    // A move whose new member is frozen cannot catch up: catching_up,
    // until it is aborted from its button.
    process.kill(victim.pid, 'SIGSTOP')
    frozen.add(victim)
    const a = await v1(port, 'PATCH', `/v1/topics/mv/partitions/${p.index}`, { replicas: target }, 202)
    await waitText(moveCell(page, a.id, 'state'), 'catching_up')
    assert.equal(await moveCell(page, a.id, 'from').innerText(), p.replicas.join(', '))
    assert.equal(await moveCell(page, a.id, 'to').innerText(), target.join(', '))
    await page.locator('#moves-summary:text-is("1 under way, 0 recently finished (the metastore keeps the last 64).")').waitFor()
    // The lag is known only on the partition's leader, once the new member
    // fetched from it: the frozen one never did.
    assert.equal(await moveCell(page, a.id, 'progress').innerText(), 'lag not known here')
    // The bytes of a copy, once the API gives them (answered here as a
    // build that counts them would): a bar and the numbers.
    await page.route('**/v1/cluster/moves', async (route) => {
      const resp = await route.fetch()
      const j = await resp.json()
      for (const m of j.moves) if (m.id === a.id) Object.assign(m, { bytes_copied: 512 * 1024, bytes_total: 1024 * 1024, lag_records: 7 })
      await route.fulfill({ response: resp, json: j })
    })
    await waitText(moveCell(page, a.id, 'progress'), '512.0 KiB of 1.0 MiB (50%); 7 records behind')
    assert.equal(await page.locator(`tr[data-move="${a.id}"] progress`).getAttribute('value'), String(512 * 1024))
    await assertNotBlank(page, 'moves-1280', 1280)
    await page.unroute('**/v1/cluster/moves')
    let said = await uiAction(page, (pg) => pg.click(`button[data-k="abort-${a.id}"]`), 'Abort the move')
    assert.equal(said, `Move ${a.id} of mv/${p.index} aborted.`)
    await waitText(moveCell(page, a.id, 'state'), 'aborted')
    assert.match(await moveCell(page, a.id, 'error').innerText(), /^aborted by admin/)
    assert.equal(await page.locator(`button[data-k="abort-${a.id}"]`).count(), 0, 'an aborted move still offers Abort')
    let moves = (await v1(port, 'GET', '/v1/cluster/moves', undefined, 200)).moves
    assert.equal(moves.find((m) => m.id === a.id).state, 'aborted')

    // The same move again; someone else aborts it while the dialog is
    // open: confirming shows the API's 409 and its words.
    const b = await v1(port, 'PATCH', `/v1/topics/mv/partitions/${p.index}`, { replicas: target }, 202)
    await waitText(moveCell(page, b.id, 'state'), 'catching_up')
    await page.click(`button[data-k="abort-${b.id}"]`)
    await page.locator('#confirm').waitFor({ state: 'visible' })
    await v1(port, 'DELETE', `/v1/cluster/moves/${b.id}`, undefined, 200)
    await page.click('#confirm-ok')
    await page.locator('#flash.bad').waitFor()
    assert.match(await page.locator('#flash').innerText(),
      new RegExp(`Abort the move failed: DELETE /v1/cluster/moves/${b.id}: 409 move ${b.id} has finished \\(aborted\\)`))
    await waitText(moveCell(page, b.id, 'state'), 'aborted')
    process.kill(victim.pid, 'SIGCONT')
    frozen.delete(victim)

    // A move from the form, with its confirmation: it runs to done (the
    // new member catches up, the member left out is dropped).
    const q = (await v1(port, 'GET', '/v1/topics/mv', undefined, 200)).partition_stats.find((x) => x.index === p.index)
    const qTarget = [q.leader, spareOf(q)]
    said = await uiAction(page, async (pg) => {
      await pg.click('#move-open')
      await pg.fill('#move-topic', 'mv')
      await pg.fill('#move-partition', String(q.index))
      await pg.fill('#move-replicas', qTarget.join(', '))
      await pg.click('#move-ok')
    }, 'Move a partition')
    const begun = /Move ([0-9a-f]{16}) of mv\/\d+ begun/.exec(said)
    assert.ok(begun, said)
    await waitText(moveCell(page, begun[1], 'state'), 'done', 90000)
    assert.equal(await moveCell(page, begun[1], 'to').innerText(), qTarget.join(', '))
    assert.equal(await page.locator(`tr[data-move="${begun[1]}"] button`).count(), 0)
    const after = (await v1(port, 'GET', '/v1/topics/mv', undefined, 200)).partition_stats.find((x) => x.index === q.index)
    assert.deepEqual(after.replicas, qTarget)
    moves = (await v1(port, 'GET', '/v1/cluster/moves', undefined, 200)).moves
    assert.deepEqual(moves.map((m) => m.state).sort(), ['aborted', 'aborted', 'done'])

    // Decommission a member from its button: draining, then its replicas
    // moved off it (decommissioned); the mark cleared from the other button.
    const gone = ids.find((id) => id !== '1' && id !== metaLeader)
    said = await uiAction(page, (pg) => pg.click(`button[data-k="decom-${gone}"]`), 'Decommission the member')
    assert.equal(said, `Member ${gone} is draining: its replicas move off it.`)
    await page.locator(`tr[data-member="${gone}"] .badge:text-is("decommissioned")`).waitFor({ timeout: 120000 })
    assert.equal(await page.locator(`tr[data-member="${gone}"] td[data-col=replicas]`).innerText(), '0')
    const m = (await v1(port, 'GET', '/v1/cluster/members', undefined, 200)).members.find((x) => x.id === gone)
    assert.equal(m.draining, true)
    assert.equal(m.decommissioned, true)
    said = await uiAction(page, (pg) => pg.click(`button[data-k="undecom-${gone}"]`), 'Stop decommissioning')
    assert.equal(said, `Member ${gone} is no longer draining.`)
    await page.locator(`tr[data-member="${gone}"] button:text-is("Decommission")`).waitFor()
    assert.equal(await page.locator(`tr[data-member="${gone}"] .badge`).count(), 0)
    assert.deepEqual(errors, [])
  } finally {
    for (const n of frozen) process.kill(n.pid, 'SIGCONT')
    await browser.close()
    await nodes.stopAll()
  }
})
