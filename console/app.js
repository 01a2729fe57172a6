/* tern console: a single page over this node's /v1 API (and nsqd's /stats,
 * /topic/* and /channel/* endpoints, /info, /healthz, /readyz). Plain
 * JavaScript, no framework, nothing fetched from anywhere but this origin.
 *
 * - Credentials: typed on the login page, kept in sessionStorage (this tab
 *   only, gone when it closes), sent as HTTP Basic on every call with
 *   fetch's credentials 'omit' (so a 401 never opens the browser's own
 *   password prompt); a 401 returns to the login page.
 * - Every 2 s the current view polls what it shows; /stats feeds the trends
 *   (depth and publish rate per topic), kept in memory for 15 minutes.
 * - Rights: the user's own record (GET /v1/users/{me}) says what to offer;
 *   the server still decides every call.
 * - Failures: a banner says when the API cannot be reached or answers an
 *   error; what was last shown stays on the page. */
'use strict';

(function () {
  const POLL_MS = 2000;
  const TREND_MS = 15 * 60 * 1000;
  const STORE_KEY = 'tern.console.session';
  const PEEK_PER_PARTITION = 5;

  const $ = (id) => document.getElementById(id);

  const state = {
    auth: null,          // base64 of user:password
    user: '',
    me: null,            // the user's record, or {securityOff: true}
    timer: null,
    polling: false,
    route: { view: 'overview', topic: null },
    trends: new Map(),   // topic -> [{t, depth, count}]
    lastOk: 0,
    rendered: false,
    data: {},            // what the current view last fetched
  };

  /* ---------------------------------------------------------------- DOM */

  // h('td', {class: 'num', dataK: 'x'}, 'text', node, ...): an element
  // built without innerHTML, so server strings are never parsed as markup.
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'dataK') el.dataset.k = v;
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : v);
    }
    append(el, kids);
    return el;
  }

  function append(el, kids) {
    for (const kid of kids.flat(Infinity)) {
      if (kid === undefined || kid === null || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
  }

  const SVG = 'http://www.w3.org/2000/svg';
  function s(tag, attrs) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, v);
    return el;
  }

  // Replace container's content, keeping the focus (by data-k) and the
  // horizontal scroll of tables, so a refresh every 2 s does not throw a
  // keyboard user back to the top.
  function replace(container, nodes) {
    const active = document.activeElement;
    const key = active && container.contains(active) ? active.dataset.k : undefined;
    const scrolls = {};
    container.querySelectorAll('.scroll[data-k]').forEach((el) => { scrolls[el.dataset.k] = el.scrollLeft; });
    container.replaceChildren(...[nodes].flat(Infinity).filter((n) => n instanceof Node));
    container.querySelectorAll('.scroll[data-k]').forEach((el) => {
      if (scrolls[el.dataset.k]) el.scrollLeft = scrolls[el.dataset.k];
    });
    if (key !== undefined) {
      const again = container.querySelector(`[data-k="${CSS.escape(key)}"]`);
      if (again) again.focus();
    }
  }

  const fmt = (n) => (n === undefined || n === null ? '–' : Number(n).toLocaleString('en-US'));
  const fmtRate = (r) => (r === null || r === undefined ? '–' : r < 10 ? r.toFixed(1) : Math.round(r).toLocaleString('en-US'));
  function fmtBytes(n) {
    if (n === undefined || n === null) return '–';
    const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i === 0 ? n : n.toFixed(1)) + ' ' + u[i];
  }
  function fmtMs(ms) {
    if (ms === 0) return 'no limit';
    if (ms % 86400000 === 0) return ms / 86400000 + ' d';
    if (ms % 3600000 === 0) return ms / 3600000 + ' h';
    if (ms % 1000 === 0) return ms / 1000 + ' s';
    return ms + ' ms';
  }
  const isoSeconds = (ms) => new Date(ms).toISOString().replace('T', ' ').slice(0, 19) + ' UTC';
  const clock = (t) => new Date(t).toLocaleTimeString('en-GB');

  function table(caption, heads, rows, key, empty) {
    const thead = h('thead', {}, h('tr', {}, heads.map((c) => h('th', { scope: 'col', class: c.num ? 'num' : null }, c.label || c))));
    const body = rows.length ? rows : [h('tr', {}, h('td', { colspan: heads.length, class: 'muted' }, empty || 'None.'))];
    // The caption shows above the frame (a table wider than a phone would
    // scroll it out of sight) and stays in the table for screen readers.
    return h('div', { class: 'tablebox' }, h('p', { class: 'caption', 'aria-hidden': 'true' }, caption),
      h('div', { class: 'scroll', tabindex: '0', dataK: 'scroll-' + key, role: 'region', 'aria-label': caption },
        h('table', {}, h('caption', { class: 'sr-only' }, caption), thead, h('tbody', {}, body))));
  }
  const num = (v) => h('td', { class: 'num' }, v);

  /* ------------------------------------------------------------ banner */

  function showBanner(title, text) {
    $('banner-title').textContent = title;
    $('banner-text').textContent = text;
    $('banner').hidden = false;
  }
  function hideBanner() { $('banner').hidden = true; }

  let flashTimer = null;
  function flash(text, bad) {
    const el = $('flash');
    el.textContent = text;
    el.className = bad ? 'flash bad' : 'flash';
    el.hidden = false;
    clearTimeout(flashTimer);
    flashTimer = setTimeout(() => { el.hidden = true; }, 8000);
  }

  /* --------------------------------------------------------------- API */

  class ApiError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }
  class Unreachable extends Error {}

  // One call with the user's credentials. Resolves to the parsed JSON (null
  // for an empty body), or {status, text} with raw; rejects with
  // Unreachable (no answer) or ApiError (an answer other than 2xx). A 401
  // ends the session.
  async function api(method, path, body, opts) {
    const o = opts || {};
    const headers = { 'X-Tern-Client': 'tern-console' };
    if (state.auth !== null) headers.Authorization = 'Basic ' + state.auth;
    if (body !== undefined) headers['Content-Type'] = 'application/json';
    let res, text;
    try {
      res = await fetch(path, {
        method, headers, body: body === undefined ? undefined : JSON.stringify(body),
        credentials: 'omit', cache: 'no-store', redirect: 'error',
      });
      text = await res.text();
    } catch (e) {
      throw new Unreachable(e && e.message ? e.message : String(e));
    }
    if (res.status === 401 && !o.noExpire) {
      expire('The server asked for credentials again (401): log in.');
      throw new ApiError(401, 'authentication required');
    }
    if (!res.ok && !o.any) {
      let msg = text.trim();
      try {
        const j = JSON.parse(text);
        msg = j.error || j.message || msg;
      } catch (_) { /* not JSON: the text itself */ }
      throw new ApiError(res.status, `${method} ${path.split('?')[0]}: ${res.status} ${msg || res.statusText}`);
    }
    if (o.raw || o.any) return { status: res.status, text };
    return text ? JSON.parse(text) : null;
  }

  const enc = encodeURIComponent;

  /* ------------------------------------------------------------ rights */

  function grants() { return (state.me && state.me.grants) || []; }
  function matches(pattern, name) {
    return pattern.endsWith('*') ? name.startsWith(pattern.slice(0, -1)) : pattern === name;
  }
  function isAdmin() {
    const me = state.me;
    return !!me && (me.securityOff || me.root || grants().some((g) => g.action === 'admin'));
  }
  function hasGrant(action, topic) {
    return grants().some((g) => g.action === action && (g.patterns || []).some((p) => matches(p, topic)));
  }
  const can = {
    create: () => isAdmin() || grants().some((g) => g.action === 'create'),
    manage: (t) => isAdmin() || (!!t && !!t.owner && t.owner === state.user),
    peek: (t) => isAdmin() || hasGrant('consume', t.name),
    grant: () => isAdmin(),
  };

  /* ------------------------------------------------------------ trends */

  function record(stats) {
    const now = Date.now();
    const seen = new Set();
    for (const t of (stats && stats.topics) || []) {
      const depth = (t.depth || 0) + (t.channels || []).reduce((a, c) => a + (c.depth || 0), 0);
      let series = state.trends.get(t.topic_name);
      if (!series) { series = []; state.trends.set(t.topic_name, series); }
      series.push({ t: now, depth, count: t.message_count || 0 });
      while (series.length && series[0].t < now - TREND_MS) series.shift();
      seen.add(t.topic_name);
    }
    for (const name of [...state.trends.keys()]) if (!seen.has(name)) state.trends.delete(name);
  }

  // Publish rate (messages/s) between consecutive samples.
  function rates(series) {
    const out = [];
    for (let i = 1; i < series.length; i++) {
      const dt = (series[i].t - series[i - 1].t) / 1000;
      const d = series[i].count - series[i - 1].count;
      out.push({ t: series[i].t, v: dt > 0 && d >= 0 ? d / dt : 0 });
    }
    return out;
  }
  function lastRate(name) {
    const r = rates(state.trends.get(name) || []);
    return r.length ? r[r.length - 1].v : null;
  }

  // A small SVG line chart of points [{t, v}] over the last 15 minutes.
  function spark(points, label, cls, big) {
    const W = 300, H = big ? 60 : 28;
    const svg = s('svg', { class: 'spark', viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: 'none', role: 'img' });
    const max = Math.max(1, ...points.map((p) => p.v));
    const now = Date.now();
    const x = (t) => Math.max(0, W - ((now - t) / TREND_MS) * W);
    const y = (v) => H - 2 - (v / max) * (H - 4);
    svg.append(s('line', { x1: 0, y1: H - 1, x2: W, y2: H - 1 }));
    if (points.length) {
      const pts = points.length === 1 ? [points[0], { t: now, v: points[0].v }] : points;
      svg.append(s('polyline', { class: cls, points: pts.map((p) => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(' ') }));
    }
    const lo = points.length ? Math.min(...points.map((p) => p.v)) : 0;
    const hi = points.length ? Math.max(...points.map((p) => p.v)) : 0;
    svg.setAttribute('aria-label', `${label}, last 15 minutes: ${points.length} samples, from ${fmtRate(lo)} to ${fmtRate(hi)}`);
    const title = s('title', {});
    title.textContent = svg.getAttribute('aria-label');
    svg.prepend(title);
    return svg;
  }
  const depthPoints = (name) => (state.trends.get(name) || []).map((p) => ({ t: p.t, v: p.depth }));

  /* ------------------------------------------------------------ dialogs */

  // Ask before doing fn; resolves once it ran (or was cancelled).
  function confirmThen(title, text, okLabel, fn) {
    const d = $('confirm');
    $('confirm-title').textContent = title;
    $('confirm-text').textContent = text;
    $('confirm-ok').textContent = okLabel;
    d.returnValue = '';
    d.addEventListener('close', async function once() {
      d.removeEventListener('close', once);
      if (d.returnValue !== 'ok') return;
      try {
        const msg = await fn();
        flash(msg);
      } catch (e) {
        failed(e, title);
      }
      poll();
    });
    d.showModal();
    $('confirm-cancel').focus();
  }

  function failed(e, what) {
    if (e instanceof Unreachable) showBanner('The tern API is unreachable.', `${what}: ${e.message}`);
    else if (!(e instanceof ApiError && e.status === 401)) flash(`${what} failed: ${e.message}`, true);
  }

  function openCreate() {
    const d = $('create-topic');
    $('create-form').reset();
    d.returnValue = '';
    d.showModal();
    $('create-name').focus();
  }

  function onCreateClose() {
    const d = $('create-topic');
    if (d.returnValue !== 'ok') return;
    const name = $('create-name').value.trim();
    const partitions = Number($('create-partitions').value);
    const retention = $('create-retention').value.trim();
    const body = { name, partitions };
    if (retention !== '') body.retention_ms = Math.round(Number(retention) * 3600000);
    confirmThen('Create a topic', `Create topic "${name}" with ${partitions} partition${partitions === 1 ? '' : 's'}` +
      (retention !== '' ? ` and a retention of ${fmtMs(body.retention_ms)}` : '') + '?', 'Create', async () => {
      await api('POST', '/v1/topics', body);
      return `Topic ${name} created.`;
    });
  }

  let grantFor = null;
  function openGrant(user) {
    grantFor = user;
    $('grant-form').reset();
    $('grant-user').textContent = `User ${user.username} now holds: ${grantText(user.grants) || 'no grants'}.`;
    $('grant').returnValue = '';
    $('grant').showModal();
    $('grant-action').focus();
  }

  function onGrantClose() {
    const d = $('grant');
    if (d.returnValue !== 'ok' || grantFor === null) return;
    const user = grantFor;
    const action = $('grant-action').value;
    const patterns = action === 'admin' ? [] : $('grant-patterns').value.split(',').map((p) => p.trim()).filter(Boolean);
    const next = (user.grants || []).concat([{ action, patterns }]);
    confirmThen('Grant', `Give user "${user.username}" the grant ${action}${patterns.length ? ' on ' + patterns.join(', ') : ''}?`,
      'Grant', async () => {
        await api('PUT', `/v1/users/${enc(user.username)}/grants`, { grants: next });
        return `User ${user.username}: grant ${action} added.`;
      });
  }

  function revoke(user, index) {
    const g = user.grants[index];
    const next = user.grants.filter((_, i) => i !== index);
    confirmThen('Remove a grant', `Remove the grant ${g.action}${g.patterns.length ? ' on ' + g.patterns.join(', ') : ''} from user "${user.username}"?`,
      'Remove', async () => {
        await api('PUT', `/v1/users/${enc(user.username)}/grants`, { grants: next });
        return `User ${user.username}: grant ${g.action} removed.`;
      });
  }

  // Peek: replay reads of the oldest few messages of each partition. Only
  // on this click are bodies fetched and shown.
  async function peek(topic) {
    const d = $('peek');
    const box = $('peek-body');
    $('peek-title').textContent = `Peek: ${topic.name}`;
    box.replaceChildren(h('p', { class: 'muted' }, 'Reading…'));
    d.showModal();
    $('peek-close').focus();
    // One partition's oldest few messages, read in order; the partitions
    // are read side by side and shown in their order.
    async function partition(p) {
      const out = [];
      if (p.error || p.oldest_offset === undefined) {
        out.push(h('p', { class: 'muted' }, `Partition ${p.index}: ${p.error || 'not open on its owner yet'}.`));
        return out;
      }
      const end = Math.min(p.high_watermark, p.oldest_offset + PEEK_PER_PARTITION);
      if (end <= p.oldest_offset) {
        out.push(h('p', { class: 'muted' }, `Partition ${p.index}: empty.`));
        return out;
      }
      for (let off = p.oldest_offset; off < end; off++) {
        const r = await api('GET', `/v1/topics/${enc(topic.name)}/consume?partition=${p.index}&offset=${off}`, undefined, { any: true });
        if (r.status === 200) {
          const m = JSON.parse(r.text);
          const payload = typeof m.payload === 'string' ? m.payload : JSON.stringify(m.payload, null, 2);
          const key = m.key !== undefined ? `, key ${m.key}${m.key_encoding ? ' (base64)' : ''}` : '';
          out.push(h('h3', {}, `Partition ${m.partition}, offset ${m.offset}`),
            h('p', { class: 'muted' }, `${isoSeconds(m.timestamp * 1000)}${key}${m.payload_encoding ? '; payload in base64' : ''}`),
            h('pre', {}, payload));
        } else if (r.status === 204) {
          break; // past the high watermark now
        } else if (r.status !== 410) { // 410: aged out or no record there
          const j = safeJson(r.text) || {};
          out.push(h('p', { class: 'error' }, `Partition ${p.index}, offset ${off}: ${r.status} ${j.error || r.text}`));
          break;
        }
      }
      return out;
    }
    try {
      const parts = await Promise.all((topic.partition_stats || []).map(partition));
      const out = parts.flat();
      box.replaceChildren(...(out.length ? out : [h('p', { class: 'muted' }, 'No messages retained.')]));
    } catch (e) {
      box.replaceChildren(h('p', { class: 'error' }, e.message));
    }
  }

  /* ------------------------------------------------------------- views */

  function nsqAction(path, topic, channel) {
    return () => api('POST', `${path}?topic=${enc(topic)}${channel !== undefined ? '&channel=' + enc(channel) : ''}`);
  }

  function actionButton(label, key, title, text, ok, fn, msg) {
    return h('button', { type: 'button', class: 'small', dataK: key, onclick: () => confirmThen(title, text, ok, async () => { await fn(); return msg; }) }, label);
  }

  async function fetchTopics() {
    const out = [];
    let token = '';
    for (let i = 0; i < 20; i++) {
      const page = await api('GET', `/v1/topics?limit=1000${token ? '&page_token=' + enc(token) : ''}`);
      out.push(...(page.topics || []));
      token = page.next_page_token || '';
      if (!token) break;
    }
    return out;
  }

  function statsTopic(name) {
    return ((state.data.stats && state.data.stats.topics) || []).find((t) => t.topic_name === name);
  }

  const views = {
    overview: {
      async load() {
        const [info, healthz, readyz, members] = await Promise.all([
          api('GET', '/info', undefined, { any: true }),
          api('GET', '/healthz', undefined, { any: true }),
          api('GET', '/readyz', undefined, { any: true }),
          isAdmin() ? api('GET', '/v1/cluster/members') : Promise.resolve(null),
        ]);
        return { info: safeJson(info.text), healthz, readyz, members };
      },
      render(d) {
        const st = (r) => {
          const j = safeJson(r.text) || {};
          return h('span', { class: r.status === 200 ? 'status-ok' : 'status-bad' }, `${r.status} ${j.status || j.error || ''}`);
        };
        const topics = (state.data.stats && state.data.stats.topics) || [];
        let depth = 0, rate = 0;
        for (const t of topics) {
          const series = state.trends.get(t.topic_name) || [];
          if (series.length) depth += series[series.length - 1].depth;
          rate += lastRate(t.topic_name) || 0;
        }
        const info = d.info || {};
        const cards = h('div', { class: 'cards' },
          h('div', { class: 'card' }, h('h3', {}, 'Node'), h('div', { class: 'big' }, info.hostname || '–'),
            h('div', { class: 'muted' }, `tern ${info.version || '?'}, NSQ TCP ${info.tcp_port || '?'}, HTTP ${info.http_port || '?'}`)),
          h('div', { class: 'card' }, h('h3', {}, 'Health (/healthz)'), h('div', { class: 'big' }, st(d.healthz))),
          h('div', { class: 'card' }, h('h3', {}, 'Readiness (/readyz)'), h('div', { class: 'big' }, st(d.readyz))),
          h('div', { class: 'card' }, h('h3', {}, 'Topics on this node'), h('div', { class: 'big' }, fmt(topics.length))),
          h('div', { class: 'card' }, h('h3', {}, 'Publish rate'), h('div', { class: 'big' }, fmtRate(rate) + ' /s')),
          h('div', { class: 'card' }, h('h3', {}, 'Depth'), h('div', { class: 'big' }, fmt(depth))));
        return [h('h1', {}, 'Overview'), cards, h('h2', {}, 'Nodes'), membersTable(d.members)];
      },
    },

    topics: {
      async load() {
        return { topics: await fetchTopics() };
      },
      render(d) {
        const byName = new Map(d.topics.map((t) => [t.name, t]));
        for (const t of (state.data.stats && state.data.stats.topics) || []) {
          if (!byName.has(t.topic_name)) byName.set(t.topic_name, { name: t.topic_name, partitions: null, nsqOnly: true });
        }
        const rows = [...byName.values()].sort((a, b) => (a.name < b.name ? -1 : 1)).map((t) => {
          const st = statsTopic(t.name);
          const series = state.trends.get(t.name) || [];
          const depth = series.length ? series[series.length - 1].depth : null;
          return h('tr', {},
            h('th', { scope: 'row' }, h('a', { href: '#/topics/' + enc(t.name), dataK: 'topic-' + t.name }, t.name),
              st && st.paused ? [' ', h('span', { class: 'badge paused' }, 'paused')] : null),
            num(t.partitions === null ? '–' : fmt(t.partitions)),
            h('td', {}, t.owner || h('span', { class: 'muted' }, t.nsqOnly ? 'memory only' : 'none')),
            num(fmt(st ? st.message_count : null)),
            num(fmtRate(lastRate(t.name))),
            h('td', { class: 'num', 'data-depth': t.name }, fmt(depth)),
            num(fmt(st ? st.channels.length : (t.channels || []).length)),
            h('td', {}, spark(depthPoints(t.name), `depth of ${t.name}`, 'depth')));
        });
        const bar = h('div', { class: 'toolbar' }, h('h1', {}, 'Topics'),
          can.create() ? h('button', { type: 'button', class: 'primary', id: 'create-open', dataK: 'create-open', onclick: openCreate }, 'Create topic') : null);
        return [bar, table('Topics: messages and depth from this node, rate over the last 2 s, trend over 15 min',
          ['Topic', { label: 'Partitions', num: true }, 'Owner', { label: 'Messages', num: true }, { label: 'Rate /s', num: true },
            { label: 'Depth', num: true }, { label: 'Channels', num: true }, 'Depth, 15 min'], rows, 'topics', 'No topics yet.')];
      },
    },

    topic: {
      async load() {
        const name = state.route.topic;
        const rec = await api('GET', `/v1/topics/${enc(name)}`, undefined, { any: true });
        if (rec.status === 404) return { missing: true };
        if (rec.status !== 200) {
          const j = safeJson(rec.text) || {};
          throw new ApiError(rec.status, `GET /v1/topics/${name}: ${rec.status} ${j.error || rec.text}`);
        }
        const topic = JSON.parse(rec.text);
        const children = topic.role === 'parent' ? await api('GET', `/v1/topics/${enc(name)}/children`) : null;
        return { topic, children };
      },
      render(d) {
        const name = state.route.topic;
        if (d.missing) return [h('h1', {}, name), h('p', {}, 'No such topic (it may have been deleted). '), h('a', { href: '#/topics' }, 'Back to the topics')];
        const t = d.topic;
        const st = statsTopic(name);
        const manage = can.manage(t);
        const actions = h('div', { class: 'actions' },
          can.peek(t) ? h('button', { type: 'button', class: 'small', dataK: 'peek', id: 'peek-open', onclick: () => peek(t) }, 'Peek messages') : null,
          manage && st ? (st.paused
            ? actionButton('Unpause topic', 'tunpause', 'Unpause the topic', `Unpause topic "${name}"? Held messages go to every channel.`, 'Unpause', nsqAction('/topic/unpause', name), `Topic ${name} unpaused.`)
            : actionButton('Pause topic', 'tpause', 'Pause the topic', `Pause topic "${name}"? New messages are held at the topic until it is unpaused.`, 'Pause', nsqAction('/topic/pause', name), `Topic ${name} paused.`)) : null,
          manage && st ? actionButton('Empty topic', 'tempty', 'Empty the topic', `Drop what topic "${name}" itself holds (not its channels' messages)?`, 'Empty', nsqAction('/topic/empty', name), `Topic ${name} emptied.`) : null,
          manage ? actionButton('Delete topic', 'tdelete', 'Delete the topic', `Delete topic "${name}" with all its messages and channels? This cannot be undone.`, 'Delete',
            async () => { await api('DELETE', `/v1/topics/${enc(name)}`); location.hash = '#/topics'; }, `Topic ${name} deleted.`) : null);
        // A replicated topic's partitions carry their leader, replicas, ISR
        // and epoch (docs/replication.md, "What an operator sees and does").
        const pstats = t.partition_stats || [];
        const replicated = (t.replication_factor || 1) > 1 || pstats.some((p) => Array.isArray(p.isr));
        const ids = (a) => (Array.isArray(a) && a.length ? a.join(', ') : '–');
        const replState = (p) => {
          if (!Array.isArray(p.isr)) return h('td', { class: 'muted' }, 'not placed');
          const badges = [];
          if (p.offline) badges.push(h('span', { class: 'badge offline' }, 'offline'));
          else if (p.under_replicated) badges.push(h('span', { class: 'badge under-replicated' }, 'under-replicated'));
          if (p.unclean) badges.push(' ', h('span', { class: 'badge unclean', title: 'this epoch began with a forced unclean election' }, 'unclean'));
          // Replicas whose copy failed a CRC check (not repaired yet), and
          // the append errors the leader holds for its members (every
          // node's answer has them, asked of the leader): docs/replication.md.
          if (Array.isArray(p.damaged) && p.damaged.length) {
            badges.push(' ', h('span', { class: 'badge damaged', title: 'a copy failed a CRC check and is not repaired yet' }, `damaged on ${ids(p.damaged)}`));
          }
          const errs = Object.entries(p.replica_errors || {});
          if (errs.length) {
            badges.push(' ', h('span', { class: 'badge append-error', title: 'append errors the leader holds for its replicas' },
              errs.map(([node, e]) => `member ${node}: ${e}`).join('; ')));
          }
          return h('td', { 'data-col': 'state' }, badges.length ? badges : h('span', { class: 'status-ok' }, 'in sync'));
        };
        const under = pstats.filter((p) => p.under_replicated && !p.offline).length;
        const offline = pstats.filter((p) => p.offline).length;
        const factor = t.replication_factor || Math.max(1, ...pstats.map((p) => (Array.isArray(p.replicas) ? p.replicas.length : 1)));
        const facts = h('dl', { class: 'facts' },
          ...[['Partitions', t.partitions], ['Owner', t.owner || 'none (made by an NSQ door)'], ['Role', t.role + (t.parent ? ` of ${t.parent}` : '')],
            ['Retention', fmtMs(t.retention_ms)], ['Delivery', t.delivery_mode + (t.ttl_ms ? `, TTL ${fmtMs(t.ttl_ms)}` : '')],
            ['Durability', t.durability], ['Visibility timeout', fmtMs(t.visibility_timeout_ms)],
            ['Max attempts', t.max_attempts || 'no dead-lettering'], ['Created', isoSeconds(t.created_at * 1000)]]
            .map(([k, v]) => [h('dt', {}, k), h('dd', {}, String(v))]).flat(),
          h('dt', {}, 'Replication'),
          h('dd', { id: 'topic-replication' }, replicated
            ? [`factor ${factor}` + (t.min_insync_replicas ? `, at least ${t.min_insync_replicas} in sync to write` : ''),
                under ? [' ', h('span', { class: 'badge under-replicated' }, `${under} under-replicated`)] : null,
                offline ? [' ', h('span', { class: 'badge offline' }, `${offline} offline`)] : null]
            : 'none (factor 1: one owner per partition)'));
        const series = state.trends.get(name) || [];
        const now = series.length ? series[series.length - 1] : null;
        const trends = h('div', { class: 'cards' },
          h('div', { class: 'card' }, h('h3', {}, 'Depth'), h('div', { class: 'big', id: 'topic-depth' }, fmt(now ? now.depth : null)),
            spark(depthPoints(name), `depth of ${name}`, 'depth', true), h('div', { class: 'legend' }, 'last 15 minutes')),
          h('div', { class: 'card' }, h('h3', {}, 'Publish rate'), h('div', { class: 'big' }, fmtRate(lastRate(name)) + ' /s'),
            spark(rates(series), `publish rate of ${name}`, 'rate', true), h('div', { class: 'legend' }, 'last 15 minutes')),
          h('div', { class: 'card' }, h('h3', {}, 'Messages'), h('div', { class: 'big' }, fmt(st ? st.message_count : null)),
            h('div', { class: 'muted' }, st ? `${fmtBytes(st.message_bytes)} published through this node` : 'no stats on this node')));
        const parts = pstats.map((p) => h('tr', { 'data-partition': String(p.index) },
          h('th', { scope: 'row' }, String(p.index)),
          replicated
            ? [h('td', { 'data-col': 'leader' }, p.leader ? String(p.leader) : (p.offline ? 'none' : '–')),
                h('td', { 'data-col': 'replicas' }, ids(p.replicas)), h('td', { 'data-col': 'isr' }, ids(p.isr)),
                num(fmt(p.leader_epoch)), replState(p)]
            : h('td', {}, p.owner_node === null ? 'unplaced' : String(p.owner_node)),
          p.error ? h('td', { colspan: 6, class: 'error' }, p.error) : [num(fmt(p.oldest_offset)), num(fmt(p.next_offset)), num(fmt(p.high_watermark)),
            h('td', { class: 'num', 'data-col': 'messages' }, fmt(p.message_count)), num(fmt(p.segments)), num(fmtBytes(p.size_bytes))]));
        const chans = ((st && st.channels) || []).map((c) => {
          const lag = (c.depth || 0) + (c.in_flight_count || 0) + (c.deferred_count || 0);
          const ck = `${c.channel_name}`;
          return h('tr', { 'data-channel': c.channel_name },
            h('th', { scope: 'row' }, c.channel_name, c.paused ? [' ', h('span', { class: 'badge paused' }, 'paused')] : null),
            h('td', { class: 'num', 'data-col': 'depth' }, fmt(c.depth)), num(fmt(c.in_flight_count)), num(fmt(c.deferred_count)),
            num(fmt(c.client_count)), h('td', { class: 'num', 'data-col': 'lag' }, fmt(lag)), num(fmt(c.message_count)),
            num(fmt(c.requeue_count)), num(fmt(c.timeout_count)),
            h('td', {}, manage ? h('div', { class: 'actions' },
              c.paused
                ? actionButton('Unpause', 'cunpause-' + ck, 'Unpause the channel', `Unpause channel "${c.channel_name}" of "${name}"?`, 'Unpause', nsqAction('/channel/unpause', name, c.channel_name), `Channel ${c.channel_name} unpaused.`)
                : actionButton('Pause', 'cpause-' + ck, 'Pause the channel', `Pause channel "${c.channel_name}" of "${name}"? Its consumers get nothing until it is unpaused.`, 'Pause', nsqAction('/channel/pause', name, c.channel_name), `Channel ${c.channel_name} paused.`),
              actionButton('Empty', 'cempty-' + ck, 'Empty the channel', `Drop every message channel "${c.channel_name}" of "${name}" holds (backlog, deferred and in flight)? This cannot be undone.`, 'Empty', nsqAction('/channel/empty', name, c.channel_name), `Channel ${c.channel_name} emptied.`),
              actionButton('Delete', 'cdelete-' + ck, 'Delete the channel', `Delete channel "${c.channel_name}" of "${name}"? Its consumers are disconnected.`, 'Delete', nsqAction('/channel/delete', name, c.channel_name), `Channel ${c.channel_name} deleted.`))
              : h('span', { class: 'muted' }, '–')));
        });
        const kids = ((d.children && d.children.children) || []).map((c) => h('tr', {},
          h('th', { scope: 'row' }, h('a', { href: '#/topics/' + enc(c.name), dataK: 'child-' + c.name }, c.name)),
          num(fmtMs(c.delay_ms)), num(fmt(c.lag_messages)), h('td', {}, c.lag_complete ? 'yes' : 'not yet (copier starting)')));
        return [
          h('p', {}, h('a', { href: '#/topics' }, '← Topics')),
          h('div', { class: 'toolbar' }, h('h1', {}, name, st && st.paused ? [' ', h('span', { class: 'badge paused' }, 'paused')] : null), actions),
          facts, trends,
          h('h2', {}, 'Channels'),
          table(`Channels of ${name} on this node; lag = depth + in flight + deferred (published, not yet finished)`,
            ['Channel', { label: 'Depth', num: true }, { label: 'In flight', num: true }, { label: 'Deferred', num: true },
              { label: 'Consumers', num: true }, { label: 'Lag', num: true }, { label: 'Messages', num: true },
              { label: 'Requeued', num: true }, { label: 'Timed out', num: true }, 'Actions'], chans, 'channels', 'No channels on this node.'),
          h('h2', {}, 'Partitions'),
          table(`Partitions of ${name}`, ['Partition', ...(replicated ? ['Leader', 'Replicas', 'In sync (ISR)', { label: 'Leader epoch', num: true }, 'State'] : ['Owner node']),
            { label: 'Oldest', num: true }, { label: 'Next offset', num: true },
            { label: 'High watermark', num: true }, { label: 'Messages', num: true }, { label: 'Segments', num: true }, { label: 'Size', num: true }], parts, 'partitions'),
          t.role === 'parent' ? [h('h2', {}, 'Children'), table(`Children of ${name}`, ['Child', { label: 'Delay', num: true }, { label: 'Lag', num: true }, 'Lag complete'], kids, 'children')] : null,
          t.role === 'child' ? h('p', {}, 'A child of ', h('a', { href: '#/topics/' + enc(t.parent) }, t.parent), `, delay ${fmtMs(t.fanout_delay_ms || 0)}.`) : null,
        ];
      },
    },

    users: {
      async load() {
        if (isAdmin() && !state.me.securityOff) return { users: await api('GET', '/v1/users') };
        if (state.me.securityOff) return { users: [] };
        return { users: [await api('GET', `/v1/users/${enc(state.user)}`)] };
      },
      render(d) {
        const rows = d.users.map((u) => h('tr', {},
          h('th', { scope: 'row' }, u.username, u.root ? [' ', h('span', { class: 'badge' }, 'root')] : null),
          h('td', {}, (u.grants || []).length ? h('ul', { class: 'grants' }, u.grants.map((g, i) => h('li', {}, grantText([g]),
            can.grant() && !u.root && u.username !== state.user ? [' ', h('button', { type: 'button', class: 'link', dataK: `revoke-${u.username}-${i}`, onclick: () => revoke(u, i) }, 'remove')] : null)))
            : h('span', { class: 'muted' }, 'none')),
          h('td', {}, isoSeconds(u.updated_at_ms)),
          h('td', {}, can.grant() && !u.root && u.username !== state.user
            ? h('button', { type: 'button', class: 'small', dataK: 'grant-' + u.username, onclick: () => openGrant(u) }, 'Add grant') : h('span', { class: 'muted' }, '–'))));
        const note = state.me.securityOff ? h('p', { class: 'muted' }, 'Security is off on this node (security-enabled=false): no users are checked.')
          : !isAdmin() ? h('p', { class: 'muted' }, 'Only admins see every user; this is your own record.') : null;
        return [h('h1', {}, 'Users and grants'), note,
          table('Users', ['User', 'Grants', 'Changed', 'Actions'], rows, 'users', 'No users.')];
      },
    },

    cluster: {
      async load() {
        if (!isAdmin()) return { denied: true };
        const [members, moves] = await Promise.all([api('GET', '/v1/cluster/members'), api('GET', '/v1/cluster/moves')]);
        return { members, moves };
      },
      render(d) {
        if (d.denied) return [h('h1', {}, 'Cluster'), h('p', {}, 'The cluster routes are for admins.')];
        const moves = sortMoves(d.moves.moves || []);
        const under = moves.filter((m) => !FINISHED.has(m.state)).length;
        return [h('h1', {}, 'Cluster'), h('h2', {}, 'Members'), membersTable(d.members, true),
          h('div', { class: 'toolbar' }, h('h2', { id: 'moves-title' }, 'Partition moves'),
            h('button', { type: 'button', class: 'primary', id: 'move-open', dataK: 'move-open', onclick: openMove }, 'Move partition')),
          h('p', { class: 'muted', id: 'moves-summary' }, `${under} under way, ${moves.length - under} recently finished (the metastore keeps the last 64).`),
          table('Partition moves under way and recently finished', ['Move', 'Topic', { label: 'Partition', num: true }, 'From', 'To', 'State',
            'Progress', 'Started', 'Finished', 'Error', 'Actions'], moves.map(moveRow), 'moves', 'No moves under way or recently finished.')];
      },
    },
  };

  /* ------------------------------------------------------------- moves */

  // A move's states (GET /v1/cluster/moves): under way, then how it ended.
  const FINISHED = new Set(['done', 'aborted', 'failed']);
  const MOVE_BADGE = { copying: 'moving', catching_up: 'moving', handing_over: 'moving', done: 'done', aborted: 'paused', failed: 'offline' };

  // Under way first (oldest first), then the finished ones, newest first.
  function sortMoves(list) {
    const running = list.filter((m) => !FINISHED.has(m.state)).sort((a, b) => (a.started_ms || 0) - (b.started_ms || 0));
    const ended = list.filter((m) => FINISHED.has(m.state)).sort((a, b) => (b.finished_ms || 0) - (a.finished_ms || 0));
    return running.concat(ended);
  }

  const nodeList = (a) => (Array.isArray(a) ? a.join(', ') : a === undefined || a === null ? '–' : String(a));

  // What is known of a move's progress: the bytes copied of the bytes to
  // copy where the API gives them, else the records the farthest-behind
  // new member lacks (the partition's leader knows them; every node asks it).
  function moveProgress(m) {
    const parts = [];
    if (typeof m.bytes_total === 'number' && m.bytes_total > 0 && typeof m.bytes_copied === 'number') {
      const pct = Math.min(100, Math.floor((100 * m.bytes_copied) / m.bytes_total));
      parts.push(h('progress', { max: String(m.bytes_total), value: String(Math.min(m.bytes_copied, m.bytes_total)), 'aria-label': `copied ${pct}%` }),
        ' ', `${fmtBytes(m.bytes_copied)} of ${fmtBytes(m.bytes_total)} (${pct}%)`);
    } else if (typeof m.bytes_copied === 'number' && m.bytes_copied > 0) {
      parts.push(`${fmtBytes(m.bytes_copied)} copied`);
    }
    if (!FINISHED.has(m.state)) {
      if (parts.length) parts.push('; ');
      if (typeof m.lag_records === 'number') parts.push(m.lag_records === 0 ? 'caught up' : `${fmt(m.lag_records)} records behind`);
      else if (!parts.length) parts.push(h('span', { class: 'muted', title: 'the partition\'s leader knows it once the new members fetched from it; it did not tell (yet)' }, 'lag not known here'));
    }
    return parts.length ? parts : '–';
  }

  function moveTime(ms) {
    return ms ? h('span', { title: isoSeconds(ms) }, clock(ms)) : '–';
  }

  function moveRow(m) {
    const running = !FINISHED.has(m.state);
    const what = `move ${m.id} of ${m.topic}/${m.partition}`;
    return h('tr', { 'data-move': m.id },
      h('th', { scope: 'row' }, h('code', {}, m.id)),
      h('td', {}, h('a', { href: '#/topics/' + enc(m.topic) }, m.topic)), num(fmt(m.partition)),
      h('td', { 'data-col': 'from' }, nodeList(m.from)), h('td', { 'data-col': 'to' }, nodeList(m.to)),
      h('td', { 'data-col': 'state' }, h('span', { class: 'badge ' + (MOVE_BADGE[m.state] || '') }, String(m.state || '?'))),
      h('td', { 'data-col': 'progress' }, moveProgress(m)),
      h('td', {}, moveTime(m.started_ms)), h('td', {}, moveTime(m.finished_ms)),
      h('td', { 'data-col': 'error', class: m.state === 'failed' ? 'error' : null }, m.error ? String(m.error) : '–'),
      h('td', {}, running
        ? actionButton('Abort', 'abort-' + m.id, 'Abort the move',
          `Abort ${what}? The partition stays on its old replicas (${nodeList(m.from)}), fully served; what the new members copied is set aside.`, 'Abort',
          () => api('DELETE', `/v1/cluster/moves/${enc(m.id)}`), `Move ${m.id} of ${m.topic}/${m.partition} aborted.`)
        : h('span', { class: 'muted' }, '–')));
  }

  function openMove() {
    const d = $('move');
    $('move-form').reset();
    d.returnValue = '';
    d.showModal();
    $('move-topic').focus();
  }

  function onMoveClose() {
    const d = $('move');
    if (d.returnValue !== 'ok') return;
    const topic = $('move-topic').value.trim();
    const partition = Number($('move-partition').value);
    const replicas = $('move-replicas').value.split(',').map((x) => x.trim()).filter(Boolean);
    confirmThen('Move a partition', `Give partition ${partition} of "${topic}" the replicas ${replicas.join(', ')} (preferred leader first)? ` +
      'It keeps serving while the new members catch up.', 'Move', async () => {
      const r = await api('PATCH', `/v1/topics/${enc(topic)}/partitions/${partition}`, { replicas });
      return `Move ${r.id} of ${topic}/${partition} begun: ${nodeList(r.from)} -> ${nodeList(r.to)}.`;
    });
  }

  function memberActions(x) {
    const id = String(x.id);
    if (x.draining) {
      return actionButton('Stop decommission', 'undecom-' + id, 'Stop decommissioning',
        `Stop decommissioning member ${id}? Moves already begun run to their end; no new one starts.`, 'Stop',
        () => api('DELETE', `/v1/cluster/members/${enc(id)}/decommission`), `Member ${id} is no longer draining.`);
    }
    return actionButton('Decommission', 'decom-' + id, 'Decommission the member',
      `Decommission member ${id}? Every replica it holds is moved to the other members, at most two at once; it then holds nothing.`, 'Decommission',
      () => api('POST', `/v1/cluster/members/${enc(id)}/decommission`), `Member ${id} is draining: its replicas move off it.`);
  }

  // The members as this node's metastore replica knows them; actions: the
  // cluster view's Decommission / Stop decommission buttons.
  function membersTable(m, actions) {
    if (!m) return h('p', { class: 'muted' }, 'Members are shown to admins (GET /v1/cluster/members).');
    const rows = (m.members || []).map((x) => h('tr', { 'data-member': String(x.id) },
      h('th', { scope: 'row' }, String(x.id), x.leader ? [' ', h('span', { class: 'badge' }, 'leader')] : null),
      h('td', {}, x.api_addr || h('span', { class: 'muted' }, 'not registered')), h('td', {}, x.raft_addr || x.addr),
      h('td', { 'data-col': 'status' }, h('span', { class: x.status === 'alive' ? 'status-ok' : 'status-bad' }, x.status),
        x.decommissioned ? [' ', h('span', { class: 'badge done' }, 'decommissioned')]
          : x.draining ? [' ', h('span', { class: 'badge paused' }, 'draining')] : null),
      num(fmt(x.owned_partitions)), h('td', { class: 'num', 'data-col': 'replicas' }, fmt(x.replica_partitions)),
      h('td', { class: 'num', 'data-col': 'moves-out' }, fmt(x.outbound_moves)),
      h('td', {}, x.last_heartbeat_ms ? clock(x.last_heartbeat_ms) : '–'),
      // The leader's Raft contact: only the metastore leader answers it.
      h('td', {}, x.last_heard_ms_ago === null || x.last_heard_ms_ago === undefined ? '–'
        : h('span', { class: x.heard_recently ? '' : 'status-bad' }, fmt(x.last_heard_ms_ago) + ' ms ago')),
      actions ? h('td', {}, memberActions(x)) : null));
    return table('Cluster members, as this node\'s metastore replica knows them', ['Member', 'API address', 'Raft address', 'Status',
      { label: 'Partitions', num: true }, { label: 'Replicas held', num: true }, { label: 'Moves out', num: true }, 'Last heartbeat', 'Last heard (leader)',
      ...(actions ? ['Actions'] : [])], rows, 'members', 'No members registered yet.');
  }

  function grantText(gs) {
    return (gs || []).map((g) => g.action + (g.patterns && g.patterns.length ? ' ' + g.patterns.join(', ') : '')).join('; ');
  }
  function safeJson(text) {
    try { return JSON.parse(text); } catch (_) { return null; }
  }

  /* --------------------------------------------------------- the loop */

  function viewName() { return state.route.view; }

  async function poll() {
    if (state.auth === null) return;
    clearTimeout(state.timer);
    if (state.polling) { state.again = true; return; }
    state.polling = true;
    const route = state.route;
    try {
      await refreshMe();
      const stats = await api('GET', '/stats?format=json&include_clients=false');
      record(stats);
      state.data.stats = stats;
      const v = views[route.view];
      const d = await v.load();
      if (route === state.route && state.auth !== null) {
        replace($('view'), v.render(d));
        state.rendered = true;
      }
      state.lastOk = Date.now();
      hideBanner();
    } catch (e) {
      if (e instanceof Unreachable) {
        showBanner('The tern API is unreachable.', `${location.origin} did not answer (${e.message}). ` +
          (state.lastOk ? `Last answer at ${clock(state.lastOk)}; ` : '') + 'retrying every 2 s. What is shown may be stale.');
      } else if (!(e instanceof ApiError && e.status === 401)) {
        showBanner('The tern API answered with an error.', e.message + ' Retrying every 2 s.');
      }
      if (!state.rendered && state.auth !== null) {
        replace($('view'), [h('h1', {}, 'Waiting for the API'), h('p', { class: 'muted' }, 'Nothing to show until the node answers.')]);
        state.rendered = true;
      }
    } finally {
      state.polling = false;
    }
    if (state.auth === null) return;
    if (state.again) { state.again = false; poll(); return; }
    state.timer = setTimeout(poll, POLL_MS);
  }

  function route() {
    const hash = location.hash.replace(/^#\/?/, '');
    const [view, ...rest] = hash.split('/');
    let r = { view: 'overview', topic: null };
    if (view === 'topics' && rest.length && rest[0] !== '') r = { view: 'topic', topic: decodeURIComponent(rest.join('/')) };
    else if (views[view] && view !== 'topic') r = { view, topic: null };
    state.route = r;
    const nav = r.view === 'topic' ? 'topics' : r.view;
    document.querySelectorAll('#nav a').forEach((a) => {
      if (a.dataset.view === nav) a.setAttribute('aria-current', 'page');
      else a.removeAttribute('aria-current');
    });
    document.title = `tern console: ${r.topic || nav}`;
    state.rendered = false;
    $('view').replaceChildren(h('p', { class: 'muted' }, 'Loading…'));
    poll();
  }

  /* -------------------------------------------------------- session */

  function showLogin(message) {
    $('nav').hidden = true;
    $('who').hidden = true;
    $('view').hidden = true;
    $('view').replaceChildren();
    $('login').hidden = false;
    const err = $('login-error');
    err.textContent = message || '';
    err.hidden = !message;
    $('login-password').value = '';
    ($('login-user').value ? $('login-password') : $('login-user')).focus();
  }

  function expire(message) {
    state.auth = null;
    state.me = null;
    clearTimeout(state.timer);
    sessionStorage.removeItem(STORE_KEY);
    $('flash').hidden = true;
    document.querySelectorAll('dialog[open]').forEach((d) => d.close());
    showLogin(message);
  }

  async function whoami() {
    const r = await api('GET', `/v1/users/${enc(state.user)}`, undefined, { any: true, noExpire: true });
    if (r.status === 200) return JSON.parse(r.text);
    // Authenticated, yet no such user: only with security off, where /v1
    // asks for nothing and checks nothing.
    if (r.status === 404) return { username: state.user, grants: [], securityOff: true };
    if (r.status === 401) throw new ApiError(401, 'Wrong user name or password.');
    if (r.status === 429) throw new ApiError(429, 'Too many failed attempts for this user: wait a few seconds and try again.');
    const j = safeJson(r.text) || {};
    throw new ApiError(r.status, `The server answered ${r.status}: ${j.error || r.text}`);
  }

  // Grants change without a new login (from the server's next request on):
  // the record is read again at every poll, so the actions offered follow.
  async function refreshMe() {
    if (state.me && state.me.securityOff) return;
    const me = await api('GET', `/v1/users/${enc(state.user)}`);
    state.me = me;
    $('who-name').textContent = state.user + (isAdmin() ? ' (admin)' : '');
  }

  async function start() {
    state.me = await whoami();
    sessionStorage.setItem(STORE_KEY, JSON.stringify({ user: state.user, auth: state.auth }));
    $('login').hidden = true;
    $('nav').hidden = false;
    $('who').hidden = false;
    $('who-name').textContent = state.user + (isAdmin() && !state.me.securityOff ? ' (admin)' : '');
    $('view').hidden = false;
    $('main').focus();
    route();
  }

  async function onLogin(ev) {
    ev.preventDefault();
    const user = $('login-user').value.trim();
    const password = $('login-password').value;
    state.user = user;
    state.auth = btoa(String.fromCharCode(...new TextEncoder().encode(`${user}:${password}`)));
    try {
      await start();
      hideBanner();
    } catch (e) {
      state.auth = null;
      if (e instanceof Unreachable) {
        showBanner('The tern API is unreachable.', `${location.origin} did not answer (${e.message}).`);
        showLogin('Cannot reach the server.');
      } else {
        showLogin(e.message);
      }
    }
  }

  async function resume() {
    const saved = safeJson(sessionStorage.getItem(STORE_KEY) || '');
    if (!saved || !saved.auth) { showLogin(); return; }
    state.user = saved.user;
    state.auth = saved.auth;
    $('login-user').value = saved.user;
    try {
      await start();
    } catch (e) {
      state.auth = null;
      if (e instanceof Unreachable) {
        showBanner('The tern API is unreachable.', `${location.origin} did not answer (${e.message}).`);
        showLogin('Cannot reach the server; log in again once it is back.');
      } else {
        sessionStorage.removeItem(STORE_KEY);
        showLogin(e.message);
      }
    }
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('login-form').addEventListener('submit', onLogin);
    $('logout').addEventListener('click', () => expire());
    $('create-topic').addEventListener('close', onCreateClose);
    $('grant').addEventListener('close', onGrantClose);
    $('move').addEventListener('close', onMoveClose);
    window.addEventListener('hashchange', () => { if (state.auth !== null) route(); });
    resume();
  });
})();
