// mcpl inspect: the dashboard. Plain JS, no build step. Everything a server sent is shown as
// text (textContent, never innerHTML); images and audio only as data: URLs of an allowed type.
'use strict';

const TOKEN = new URLSearchParams(location.search).get('token') || '';
const $ = (id) => document.getElementById(id);
let S = null; // the last state document

// ---- helpers -------------------------------------------------------------------------------

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = str(v);
    else if (k === 'text') e.textContent = str(v);
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'checked' || k === 'disabled') e[k] = v;
    else if (k === 'value') e.value = str(v);
    else e.setAttribute(k, str(v));
  }
  for (const c of children.flat()) {
    if (c === undefined || c === null) continue;
    e.append(c instanceof Node ? c : document.createTextNode(str(c)));
  }
  return e;
}
function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }
function fill(node, ...children) { clear(node); for (const c of children.flat()) if (c) node.append(c); return node; }
function pretty(v) { return v === undefined ? '' : JSON.stringify(v, null, 2); }
// Any value as display text, never throwing: the server shapes most of what is shown, and a
// JSON object whose `toString` is not a function makes String() and `${}` throw, which
// stopped every panel drawn after it for as long as the value was kept.
function str(v) {
  if (typeof v === 'string') return v;
  if (v === undefined || v === null) return '';
  if (typeof v !== 'object') return String(v);
  try { return JSON.stringify(v); } catch (e) { return '[not shown]'; }
}
// A template literal whose substitutions go through str().
function fmt(parts, ...vals) { return parts.reduce((acc, p, i) => acc + str(vals[i - 1]) + p); }
// A list as `a, b, c` (nothing when it is not an array).
function joined(list) { return Array.isArray(list) ? list.map(str).join(', ') : ''; }
// Re-renders a part only when what it shows changed, so open details, typed text and
// element identity survive the frequent state refreshes.
const shown = {};
function changed(name, value) {
  const key = JSON.stringify(value === undefined ? null : value);
  if (shown[name] === key) return false;
  shown[name] = key;
  return true;
}
function text(node, v) { node.textContent = str(v); }

async function api(path, body) {
  const opts = { headers: { 'X-MCPL-Token': TOKEN } };
  if (body !== undefined) {
    opts.method = 'POST';
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  let doc;
  try { doc = await r.json(); } catch (e) { doc = { ok: false, error: 'HTTP ' + r.status }; }
  return doc;
}

// One action at a time per button: disabled while it runs, its outcome shown next to it.
async function act(button, status, fn) {
  button.disabled = true;
  if (status) text(status, 'working…');
  try {
    const r = await fn();
    if (status) text(status, r && r.ok === false ? 'failed' : 'done');
    return r;
  } catch (e) {
    if (status) text(status, 'failed: ' + e);
  } finally {
    button.disabled = false;
  }
}

function errorBox(msg) { return el('div', { class: 'box error' }, el('pre', { text: msg })); }

// The text of content: a string, or content blocks (App. B.1) rendered by type.
function contentNodes(content) {
  if (typeof content === 'string') return [el('pre', { text: content })];
  if (!Array.isArray(content)) return [el('pre', { class: 'json', text: pretty(content) })];
  return content.map(blockNode);
}
const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'];
const AUDIO_TYPES = ['audio/wav', 'audio/x-wav', 'audio/mpeg', 'audio/ogg', 'audio/webm', 'audio/mp4'];
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;
function blockNode(b) {
  if (!b || typeof b !== 'object') return el('pre', { text: str(b) });
  if (b.type === 'text') return el('pre', { text: b.text });
  if ((b.type === 'image' || b.type === 'audio') && typeof b.data === 'string' && BASE64.test(b.data)) {
    const allowed = b.type === 'image' ? IMAGE_TYPES : AUDIO_TYPES;
    if (allowed.includes(b.mimeType)) {
      const src = 'data:' + b.mimeType + ';base64,' + b.data;
      return b.type === 'image' ? el('img', { class: 'block', src, alt: 'image from the server' })
        : el('audio', { controls: '', src });
    }
    return el('pre', { text: fmt`[${b.type} of type ${b.mimeType}: not shown]` });
  }
  if (b.type === 'resource' && b.resource) {
    const r = b.resource;
    return el('div', { class: 'box' }, el('div', { class: 'mono', text: 'resource ' + str(r.uri) }),
      r.text !== undefined ? el('pre', { text: r.text }) : el('span', { class: 'muted', text: r.blob ? fmt`blob, ${r.blob.length} base64 chars` : '' }));
  }
  return el('pre', { class: 'json', text: pretty(b) });
}

// ---- state ---------------------------------------------------------------------------------

let stateTimer = null;
function scheduleState() {
  if (stateTimer) return;
  stateTimer = setTimeout(async () => { stateTimer = null; await loadState(); }, 150);
}
async function loadState() {
  const s = await api('/api/state');
  if (!s || s.ok === false) return;
  S = s;
  render(s);
}

function render(s) {
  const c = s.connection;
  text($('target'), s.target);
  text($('phase'), c.phase);
  $('phase').className = 'badge ' + (c.phase === 'ready' ? 'ready' : c.phase === 'closed' ? 'closed' : '');
  text($('mode'), c.mode || c.detail || '');
  text($('conn-target'), s.target);
  text($('conn-phase'), c.phase + (c.detail && c.phase === 'closed' ? ' — ' + c.detail : ''));
  text($('conn-generation'), c.generation);
  text($('conn-mode'), c.mode || '');
  text($('conn-protocol'), c.protocolVersion || '');
  // A later answer to initialize is one the host ignored (the first settled the request).
  const ignored = c.ignoredInitializeAnswers;
  text($('conn-server'), (c.serverInfo ? fmt`${c.serverInfo.name || ''} ${c.serverInfo.version || ''}` : '')
    + (ignored ? fmt` (${ignored.count} later answer(s) to initialize, ignored by the host)` : ''));
  text($('adv-host'), pretty(c.hostAdvertisement));
  text($('adv-server'), c.serverAdvertisement === undefined || c.serverAdvertisement === null
    ? '(no experimental.mcpl: MCP-only)' : pretty(c.serverAdvertisement));
  // Each panel on its own: one a server's data breaks must not leave the others stale.
  for (const panel of [renderGrant, renderTools, renderHooks, renderRequests, renderEvents, renderManifest, renderCheck]) {
    try { panel(s); } catch (e) { console.error(`mcpl inspect: ${panel.name} failed`, e); }
  }
}

// ---- grant ---------------------------------------------------------------------------------

let grantKey = null;
let preview = null;
function advertisedPaths(s) {
  const r = s.grant.report;
  return r ? r.advertised : [];
}
function renderGrant(s) {
  const g = s.grant;
  const adv = advertisedPaths(s);
  const key = JSON.stringify([s.connection.generation, adv, g.inForce, s.policy && s.policy.time]);
  if (key !== grantKey) {
    grantKey = key;
    buildTree(g.vocabulary, adv, g.inForce);
    preview = null;
    buildNarrow(Object.keys(g.featureSets || {}));
  }
  renderFeatureSets(s);
  const p = s.policy;
  if (!changed('policy', p)) return;
  const box = $('grant-receipt');
  if (!p) { clear(box); return; }
  fill(box, receiptNode(p));
}
function buildTree(vocabulary, advertised, inForce) {
  const root = {};
  for (const path of vocabulary) {
    let node = root;
    for (const seg of path.split('.')) node = (node[seg] = node[seg] || {});
    node['#path'] = path;
  }
  const ul = clear($('grant-tree'));
  const walk = (node, prefix, into) => {
    for (const [seg, child] of Object.entries(node)) {
      if (seg === '#path') continue;
      const name = prefix ? prefix + '.' + seg : seg;
      const li = el('li');
      const leafPath = child['#path'];
      const kids = Object.keys(child).filter((k) => k !== '#path');
      if (leafPath) {
        const isAdv = advertised.includes(leafPath);
        li.append(el('label', { class: isAdv ? '' : 'absent', title: isAdv ? '' : 'not advertised by the server' },
          el('input', { type: 'checkbox', 'data-path': leafPath, checked: inForce.includes(leafPath), disabled: !isAdv, onchange: onGrantChange }),
          ' ', kids.length ? seg + ' (leaf)' : seg));
      } else {
        li.append(el('label', {}, el('input', { type: 'checkbox', 'data-group': name, onchange: onGroupChange }), ' ', seg));
      }
      if (kids.length) {
        const sub = el('ul');
        walk(child, name, sub);
        li.append(sub);
      }
      into.append(li);
    }
  };
  walk(root, '', ul);
  syncGroups();
}
function leafBoxes() { return [...document.querySelectorAll('#grant-tree input[data-path]')]; }
function chosenPaths() { return leafBoxes().filter((b) => b.checked).map((b) => b.dataset.path); }
function syncGroups() {
  for (const g of document.querySelectorAll('#grant-tree input[data-group]')) {
    const leaves = [...g.closest('li').querySelectorAll('input[data-path]')].filter((b) => !b.disabled);
    const on = leaves.filter((b) => b.checked).length;
    g.checked = leaves.length > 0 && on === leaves.length;
    g.indeterminate = on > 0 && on < leaves.length;
    g.disabled = leaves.length === 0;
  }
}
function onGroupChange(ev) {
  for (const b of ev.target.closest('li').querySelectorAll('input[data-path]')) if (!b.disabled) b.checked = ev.target.checked;
  onGrantChange();
}
async function onGrantChange() {
  syncGroups();
  const r = await api('/api/grant/preview', { patterns: chosenPaths() });
  preview = r.ok ? r.result : null;
  if (S) renderFeatureSets(S);
}
function renderFeatureSets(s) {
  const tbody = clear($('featuresets'));
  const inForce = (s.grant.report && s.grant.report.featureSets) || {};
  for (const [name, fs] of Object.entries(s.grant.featureSets || {})) {
    const now = inForce[name];
    const then = preview && preview.featureSets ? preview.featureSets[name] : null;
    const status = (x) => !x ? el('span', { class: 'muted', text: '—' })
      : x.available ? el('span', { class: 'ok', text: 'available' })
        : el('span', { class: 'bad', text: fmt`unavailable: ${x.reason || ''}${x.missingCapabilities && x.missingCapabilities.length ? ' (missing ' + joined(x.missingCapabilities) + ')' : ''}` });
    tbody.append(el('tr', {}, el('td', { class: 'mono', text: name, title: fs.description || '' }),
      el('td', { class: 'mono', text: joined(fs.uses) }), el('td', {}, status(now)), el('td', {}, status(then))));
  }
}
function receiptNode(p) {
  const r = p.receipt;
  const box = el('div', { class: 'box', id: 'receipt-box' });
  box.append(el('div', {}, el('strong', { text: p.initial ? 'Initial policy receipt' : 'Receipt' }), ' ', el('span', { class: 'muted', text: p.time || '' })));
  if (!r) {
    box.append(el('div', { class: 'bad', text: 'no usable receipt: nothing widened' }));
  } else if (r.accepted) {
    box.append(el('div', { class: 'ok', text: 'accepted' + (r.mode ? fmt` (mode ${r.mode})` : '') }));
    for (const u of r.unavailableFeatures || []) {
      box.append(el('div', {}, el('span', { class: 'mono', text: u.featureSet }), fmt` ${u.effect || ''}: ${u.reason || ''}`,
        u.missingCapabilities && u.missingCapabilities.length ? fmt` (missing ${joined(u.missingCapabilities)})` : ''));
    }
  } else {
    box.append(el('div', { class: 'bad', text: fmt`refused, fallback ${r.fallback}` + (r.reason ? fmt`: ${r.reason}` : '') }));
  }
  const line = (label, list) => list && list.length ? el('div', {}, el('span', { class: 'muted', text: label + ' ' }), el('span', { class: 'mono', text: joined(list) })) : null;
  for (const l of [line('narrowed:', p.narrowed), line('activated:', p.activated),
    line('not activated:', p.notActivated), line('grant in force:', p.grant)]) if (l) box.append(l);
  box.append(el('details', {}, el('summary', { text: 'receipt JSON' }), el('pre', { class: 'json', text: pretty(r) })));
  return box;
}
function buildNarrow(sets) {
  fill($('narrow-sets'), sets.map((name) => el('label', { class: 'inline' },
    el('input', { type: 'checkbox', 'data-set': name }), el('span', { class: 'mono', text: name }))));
}

// ---- tools ---------------------------------------------------------------------------------

let toolsKey = null;
function tools(s) { return (s.tools && Array.isArray(s.tools.tools)) ? s.tools.tools.filter((t) => t && typeof t === 'object') : []; }
function renderTools(s) {
  // A list kept while the grant no longer holds `tools` (or the connection closed) is shown
  // as stale, with no Call: the host would refuse every call.
  const stale = s.toolsStale ? str(s.toolsStale) : '';
  text($('tools-stale'), stale);
  $('tools-stale').hidden = !stale;
  $('tool-call').disabled = !!stale;
  $('tool-call').title = stale;
  const list = tools(s);
  const key = JSON.stringify(list.map((t) => t.name));
  if (key === toolsKey) return;
  toolsKey = key;
  const sel = $('tool-select');
  const keep = sel.value;
  fill(sel, list.map((t) => el('option', { value: t.name, text: t.name })));
  if (list.some((t) => t.name === keep)) sel.value = keep;
  buildToolForm();
}
function currentTool() { return S ? tools(S).find((t) => t.name === $('tool-select').value) : null; }
function buildToolForm() {
  const t = currentTool();
  const form = clear($('tool-form'));
  text($('tool-description'), t ? t.description || '' : 'Press tools/list to list the server\'s tools.');
  if (!t) return;
  const schema = t.inputSchema && typeof t.inputSchema === 'object' ? t.inputSchema : {};
  const required = Array.isArray(schema.required) ? schema.required : [];
  const props = schema.properties && typeof schema.properties === 'object' ? schema.properties : {};
  for (const [name, p] of Object.entries(props)) {
    const prop = p && typeof p === 'object' ? p : {};
    const id = 'arg-' + name;
    let input;
    if (Array.isArray(prop.enum)) {
      input = el('select', { id, 'data-arg': name, 'data-kind': 'json' }, prop.enum.map((v) => el('option', { value: JSON.stringify(v), text: str(v) })));
    } else if (prop.type === 'boolean') {
      input = el('input', { id, type: 'checkbox', 'data-arg': name, 'data-kind': 'boolean' });
    } else if (prop.type === 'number' || prop.type === 'integer') {
      input = el('input', { id, type: 'number', 'data-arg': name, 'data-kind': prop.type });
    } else if (prop.type === 'string') {
      input = el('input', { id, type: 'text', 'data-arg': name, 'data-kind': 'string' });
    } else {
      input = el('textarea', { id, rows: 2, 'data-arg': name, 'data-kind': 'json', placeholder: 'JSON' });
    }
    input.addEventListener('input', syncRaw);
    input.addEventListener('change', syncRaw);
    form.append(el('div', { class: 'field' },
      el('label', { for: id, text: name + (required.includes(name) ? ' *' : ''), title: prop.description || '' }), input));
  }
  syncRaw();
}
function formArguments() {
  const args = {};
  for (const i of document.querySelectorAll('#tool-form [data-arg]')) {
    const k = i.dataset.arg, kind = i.dataset.kind;
    if (kind === 'boolean') { args[k] = i.checked; continue; }
    if (i.value === '') continue;
    if (kind === 'string') args[k] = i.value;
    else if (kind === 'number' || kind === 'integer') args[k] = Number(i.value);
    else { try { args[k] = JSON.parse(i.value); } catch (e) { args[k] = i.value; } }
  }
  return args;
}
function syncRaw() { if (!$('tool-raw-on').checked) $('tool-raw').value = pretty(formArguments()); }
async function callTool() {
  const t = currentTool();
  const box = $('tool-result');
  if (!t) { fill(box, errorBox('list the tools first')); return { ok: false }; }
  let args;
  if ($('tool-raw-on').checked) {
    try { args = JSON.parse($('tool-raw').value || '{}'); } catch (e) { fill(box, errorBox('raw arguments are not JSON: ' + e.message)); return { ok: false }; }
  } else args = formArguments();
  const r = await api('/api/tools/call', { name: t.name, arguments: args });
  if (!r.ok) { fill(box, errorBox(r.error)); return r; }
  const res = r.result || {};
  fill(box, el('div', { class: 'box' + (res.isError ? ' error' : ''), id: 'tool-output' },
    el('div', { class: 'muted', text: res.isError ? 'isError: the tool reported an error' : 'result' }),
    contentNodes(res.content || []),
    el('details', {}, el('summary', { text: 'result JSON' }), el('pre', { class: 'json', text: pretty(res) }))));
  return r;
}

// ---- hooks ---------------------------------------------------------------------------------

function renderHooks(s) {
  const last = s.hooks && s.hooks.length ? s.hooks[s.hooks.length - 1] : null;
  if (!changed('hook', last)) return;
  const box = $('hook-result');
  if (!last) { clear(box); return; }
  // A remembered run is cut to its bound: a member may be a preview with its size.
  const items = (v) => (Array.isArray(v) ? v.filter((x) => x && typeof x === 'object') : []);
  const count = (v) => (Array.isArray(v) ? v.length : (v && v.truncated ? fmt`cut, ${v.bytes} bytes` : 0));
  const injections = (label, v) => el('div', {}, el('h3', { text: fmt`${label} (${count(v)})` }),
    items(v).map((a) => { const i = a.injection && typeof a.injection === 'object' ? a.injection : {};
      return el('div', { class: 'box' }, el('div', { class: 'muted', text: fmt`${a.server} · ${i.namespace || ''}` }), contentNodes(i.content)); }));
  const failures = items(last.failures);
  fill(box, el('div', {}, el('div', { class: 'muted', text: fmt`${last.inferenceId} · consulted ${joined(last.consulted) || 'no server'} · lifecycle: ${last.lifecycle}` }),
    // What the servers got: without observe, userMessage null (§10.1), not the text typed.
    typeof last.userMessageWithheld === 'string' ? el('div', { class: 'muted', text: fmt`userMessage withheld: ${last.userMessageWithheld}` }) : null,
    injections('system', last.system), injections('beforeUser', last.beforeUser), injections('afterUser', last.afterUser),
    el('h3', { text: fmt`dropped by the host (${count(last.rejected)})` }),
    items(last.rejected).map((r) => el('div', { class: 'box error' }, el('strong', { text: r.category }), ' ', r.reason,
      el('pre', { class: 'json', text: pretty(r.injection) }))),
    failures.length || count(last.failures) ? el('h3', { text: fmt`failures (${count(last.failures)})` }) : null,
    failures.map((f) => errorBox(fmt`${f.server}: ${f.detail}`))));
}

// ---- server → host requests ----------------------------------------------------------------

let pendingKey = null;
function renderRequests(s) {
  const auto = s.autoAnswer;
  if (document.activeElement !== $('auto-mode') && document.activeElement !== $('auto-text')) {
    $('auto-mode').value = typeof auto === 'string' ? auto : 'text';
    if (auto && auto.text !== undefined) $('auto-text').value = auto.text;
  }
  const key = JSON.stringify(s.pending.map((p) => [p.id, p.revoked || null]));
  if (key !== pendingKey) {
    pendingKey = key;
    const box = clear($('pending'));
    if (!s.pending.length) box.append(el('p', { class: 'muted', text: 'Nothing waiting.' }));
    for (const p of s.pending) {
      const isModel = p.method === 'model/info';
      const area = el('textarea', { rows: 2, 'data-answer': p.id }, isModel ? 'mcpl-inspect' : p.suggested);
      box.append(el('div', { class: 'box' },
        el('div', {}, el('strong', { text: fmt`#${p.id} ${p.method}` }), el('span', { class: 'muted', text: fmt` since ${p.since}` })),
        p.revoked ? el('div', { class: 'bad', text: str(p.revoked) }) : null,
        el('details', {}, el('summary', { text: 'params' }), el('pre', { class: 'json', text: pretty(p.params) })),
        el('label', { class: 'muted', text: isModel ? 'model id' : 'answer text' }), area,
        el('div', { class: 'row' },
          el('button', { type: 'button', class: 'primary', text: 'Answer', onclick: async () => { await api('/api/answer', { id: p.id, text: area.value }); scheduleState(); } }),
          el('button', { type: 'button', text: 'Refuse', onclick: async () => { await api('/api/answer', { id: p.id, error: { code: -32603, message: 'refused in mcpl inspect' } }); scheduleState(); } }))));
    }
  }
  if (changed('answered', s.answered)) fill($('answered'), (s.answered || []).slice().reverse().map((a) => el('li', {},
    el('strong', { text: a.method }), el('span', { class: 'muted', text: fmt` ${a.by} · ${a.since}` }),
    el('pre', { text: a.answer && a.answer.result !== undefined ? pretty(a.answer.result) : pretty(a.answer) }))));
}

// ---- events and channels -------------------------------------------------------------------

function tagNodes(e) {
  const wire = Array.isArray(e.wireTags) ? e.wireTags : [];
  return (e.tags || []).map((t) => el('span', { class: 'tag' + (wire.includes(t) ? '' : ' implied'), title: wire.includes(t) ? 'sent' : 'implied (§16.3)', text: t }));
}
function renderEvents(s) {
  text($('event-count'), fmt`(${s.eventCount} kept)`);
  if (changed('events', s.events.map((e) => [e.generation, e.seq]))) fill($('events'), s.events.slice().reverse().map((e) => {
    const head = el('div', {}, el('strong', { text: e.kind }), ' ');
    let body = null;
    if (e.kind === 'push') {
      head.append(el('span', { class: 'mono', text: fmt`${e.featureSet} · ${e.eventId}` }));
      body = contentNodes(e.params && e.params.payload ? e.params.payload.content : '');
    } else if (e.kind === 'channel') {
      head.append(el('span', { class: 'mono', text: e.channelId }));
      body = contentNodes(e.message ? e.message.content : '');
    } else if (e.kind === 'manifest') {
      head.append(el('span', { class: 'mono', text: e.receipt ? e.receipt.revision : '' }));
    } else if (e.kind === 'mode') {
      head.append(el('span', { text: e.mode }));
    } else if (e.kind === 'list_changed') {
      head.append(el('span', { class: 'mono', text: e.list }));
    } else if (e.kind === 'notification') {
      head.append(el('span', { class: 'mono', text: e.method }));
    }
    const meta = el('div', { class: 'meta' }, tagNodes(e),
      e.treatment ? el('span', { text: fmt` → ${typeof e.treatment.behavior === 'string' ? e.treatment.behavior : JSON.stringify(e.treatment.behavior)} (rule ${e.treatment.rule})` }) : null,
      el('span', { text: fmt` · ${e.time} · connection ${e.generation}` }));
    return el('li', { class: 'event ' + e.kind, 'data-seq': e.seq }, head, body, meta);
  }));
  if (changed('channels', [s.channels, s.grant && s.grant.inForce])) renderChannels(s);
  if (changed('streams', s.streams)) fill($('streams'), (s.streams || []).slice().reverse().map((st) => el('li', {},
    el('span', { class: 'mono', text: fmt`${st.inferenceId} → ${st.channelId}` }),
    el('span', { class: st.outcome ? 'bad' : 'muted', text: st.outcome ? fmt` ${st.outcome}` : fmt` ${st.chunks} chunks, completed` }))));
}
function renderChannels(s) {
  const tbody = clear($('channels'));
  // A channel stays in the host's table when its capabilities leave the grant; no action the
  // grant no longer holds is offered on it (§5.4), each disabled saying why.
  const inForce = (s.grant && Array.isArray(s.grant.inForce)) ? s.grant.inForce : [];
  const lacking = (path) => inForce.includes(path) ? null : fmt`the grant in force does not hold ${path} (§5.4)`;
  const gated = (path, attrs) => Object.assign(attrs, { disabled: !!lacking(path), title: lacking(path) || undefined });
  $('open-send').disabled = !!lacking('channels.lifecycle');
  $('open-send').title = lacking('channels.lifecycle') || '';
  for (const c of s.channels) {
    const d = c.descriptor || {};
    const input = el('input', { type: 'text', placeholder: 'text', 'aria-label': 'text for ' + str(c.id) });
    const out = $('channel-result');
    const send = (path) => async () => {
      const r = await api(path, { channelId: c.id, text: input.value });
      fill(out, r.ok ? el('div', { class: 'box' }, el('pre', { class: 'json', text: pretty(r.result) })) : errorBox(r.error));
      scheduleState();
    };
    tbody.append(el('tr', {}, el('td', { class: 'mono', text: c.id }),
      el('td', {}, el('div', { text: fmt`${d.type || ''} ${d.label ? '· ' + str(d.label) : ''} ${d.direction ? '· ' + str(d.direction) : ''}` }),
        el('details', {}, el('summary', { text: 'descriptor' }), el('pre', { class: 'json', text: pretty(c.descriptor) }))),
      el('td', {}, input, el('div', { class: 'row' },
        el('button', gated('channels.publish', { type: 'button', text: 'Publish', onclick: send('/api/channels/publish') })),
        el('button', gated('channels.streaming', { type: 'button', text: 'Stream', onclick: send('/api/channels/stream') })),
        el('button', gated('channels.lifecycle', { type: 'button', text: 'Close', onclick: async () => { const r = await api('/api/channels/close', { channelId: c.id }); fill(out, r.ok ? el('pre', { class: 'json', text: pretty(r.result) }) : errorBox(r.error)); scheduleState(); } }))))));
  }
  if (!s.channels.length) tbody.append(el('tr', {}, el('td', { colspan: 3, class: 'muted', text: 'No channel registered.' })));
}

// ---- manifest ------------------------------------------------------------------------------

function renderManifest(s) {
  const m = s.manifest;
  text($('man-declared'), m ? m.declared || '(none)' : '');
  text($('man-recomputed'), m ? m.recomputed || '' : '');
  const match = $('man-match');
  if (!m) text(match, '');
  else { text(match, m.matches ? 'matches' : 'does not match'); match.className = m.matches ? 'ok' : 'bad'; }
  if (changed('manifest', m)) text($('man-json'), m ? pretty(m.manifest) : '');
  if (changed('manifestChanges', s.manifestChanges)) fill($('man-changes'), (s.manifestChanges || []).slice().reverse().map((c) => {
    const r = c.receipt || {};
    return el('div', { class: 'box' },
      el('div', {}, el('strong', { text: joined(r.domains) || 'no domain' }), el('span', { class: 'muted', text: fmt` · ${r.previousRevision || '?'} → ${r.revision || '?'} · ${c.time}` })),
      el('table', { class: 'grid' }, el('tbody', {}, (r.impacts || []).map((i) => el('tr', {},
        el('td', { class: 'mono', text: i.impact }), el('td', { text: i.disposition }), el('td', { class: 'mono', text: i.subject }), el('td', { class: 'muted', text: i.reason || '' }))))),
      el('details', {}, el('summary', { text: 'fetched manifest' }), el('pre', { class: 'json', text: pretty(c.manifest) })));
  }));
}

// ---- check ---------------------------------------------------------------------------------

function renderCheck(s) {
  const c = s.check;
  text($('check-status'), c.running ? 'running…' : '');
  $('check-run').disabled = c.running;
  if (!changed('check', c.last)) return;
  const box = clear($('check-result'));
  const last = c.last;
  if (!last) return;
  if (last.error) { box.append(errorBox(last.error)); return; }
  const rep = last.report || {};
  const sum = rep.summary || {};
  box.append(el('div', { class: (sum.fail ? 'bad' : 'ok'), text: fmt`${sum.pass || 0} passed, ${sum.fail || 0} failed, ${sum.warn || 0} warned, ${sum.skip || 0} skipped (exit ${last.exitCode})` }));
  box.append(el('table', { class: 'grid' }, el('tbody', {}, (rep.checks || []).map((k) => el('tr', {},
    el('td', { class: k.status === 'fail' ? 'bad' : k.status === 'pass' ? 'ok' : k.status === 'warn' ? 'warn' : 'muted', text: k.status }),
    el('td', { class: 'mono', text: k.id }), el('td', { class: 'muted', text: k.section }), el('td', { text: k.detail }))))));
}

// ---- log -----------------------------------------------------------------------------------

let logBefore = null; // null: following the newest entries
let logTimer = null;
let selectedSeq = null;
function scheduleLog() {
  if (logBefore !== null || logTimer) return;
  logTimer = setTimeout(async () => { logTimer = null; await loadLog(); }, 300);
}
function logQuery() {
  const q = new URLSearchParams({ limit: '200' });
  if ($('log-method').value) q.set('method', $('log-method').value);
  if ($('log-dir').value) q.set('dir', $('log-dir').value);
  if ($('log-marked').checked) q.set('marked', '1');
  if (logBefore !== null) q.set('before', String(logBefore));
  return q;
}
let logPage = null;
// Which entry of a batch frame a mark is about (JSON-RPC 2.0 §6), from 0; nothing on a frame.
function markEntry(m) { return Number.isInteger(m.entry) ? fmt` (entry ${m.entry})` : ''; }
async function loadLog() {
  const p = await api('/api/log?' + logQuery());
  if (!p || !p.entries) return;
  logPage = p;
  const arrow = { sent: '→', received: '←', host: '•' };
  fill($('log-rows'), p.entries.slice().reverse().map((e) => el('tr', {
    class: (e.marks.length ? 'marked' : '') + (e.seq === selectedSeq ? ' selected' : ''), 'data-seq': e.seq,
    onclick: () => showEntry(e.seq),
  },
  el('td', { text: e.seq }), el('td', { text: (e.time || '').slice(11, 23) }), el('td', { text: arrow[e.dir] || '', title: e.dir }),
  el('td', { text: e.kind }), el('td', { text: e.method || '' }), el('td', { text: e.id || '' }),
  el('td', { text: e.bytes + (e.truncated ? ' (cut)' : '') }),
  el('td', { class: 'mark' }, e.marks.map((m) => el('div', { text: fmt`${m.section} ${m.rule}` + markEntry(m), title: m.detail }))),
  el('td', { class: 'frame', text: e.preview }))));
  text($('log-status'), fmt`${p.kept} kept of at most ${p.bounds.entries} (${p.evicted} older dropped) · newest #${p.lastSeq}` + (logBefore !== null ? fmt` · showing before #${logBefore}` : ' · live'));
}
async function showEntry(seq) {
  selectedSeq = seq;
  const e = await api('/api/log/' + seq);
  const d = $('log-detail');
  if (!e || e.ok === false) { text(d, e ? e.error : ''); return; }
  let body = e.text;
  if (!e.truncated) { try { body = pretty(JSON.parse(e.text)); } catch (_) { /* shown as text */ } }
  const marks = e.marks.map((m) => fmt`${m.section} ${m.rule}` + markEntry(m) + fmt`: ${m.detail}`).join('\n');
  text(d, (marks ? marks + '\n\n' : '') + (e.truncated ? fmt`(cut: ${e.bytes} bytes, first ${e.text.length} kept)\n` : '') + body);
  for (const tr of document.querySelectorAll('#log-rows tr')) tr.classList.toggle('selected', Number(tr.dataset.seq) === seq);
}

// ---- live updates ----------------------------------------------------------------------------

function connectEvents() {
  const es = new EventSource('/api/events?token=' + encodeURIComponent(TOKEN));
  es.onopen = () => { text($('live'), 'live'); $('live').className = 'badge on'; };
  es.onerror = () => { text($('live'), 'offline'); $('live').className = 'badge off'; };
  es.onmessage = (m) => {
    let msg;
    try { msg = JSON.parse(m.data); } catch (e) { return; }
    if (msg.type === 'log') scheduleLog();
    else { scheduleState(); if (msg.type === 'resync') scheduleLog(); }
  };
}

// ---- wiring --------------------------------------------------------------------------------

function wire() {
  $('log-export').href = '/api/export?token=' + encodeURIComponent(TOKEN);
  $('restart').addEventListener('click', (ev) => act(ev.target, null, async () => { const r = await api('/api/restart', {}); await loadState(); return r; }));
  $('grant-apply').addEventListener('click', (ev) => act(ev.target, $('grant-status'), async () => {
    const r = await api('/api/grant', { patterns: chosenPaths() });
    if (!r.ok) fill($('grant-receipt'), errorBox(r.error));
    else { grantKey = null; await loadState(); }
    return r;
  }));
  $('narrow-send').addEventListener('click', (ev) => act(ev.target, null, async () => {
    const sets = [...document.querySelectorAll('#narrow-sets input:checked')].map((b) => b.dataset.set);
    const r = await api('/api/narrow', { disabled: sets });
    fill($('narrow-result'), r.ok ? el('div', { class: 'box' }, 'sent ', el('span', { class: 'mono', text: JSON.stringify(r.result.params) })) : errorBox(r.error));
    return r;
  }));
  $('tools-refresh').addEventListener('click', (ev) => act(ev.target, $('tool-status'), async () => {
    const r = await api('/api/tools/list', {});
    if (!r.ok) fill($('tool-result'), errorBox(r.error));
    await loadState();
    return r;
  }));
  $('tool-select').addEventListener('change', buildToolForm);
  $('tool-raw-on').addEventListener('change', syncRaw);
  $('tool-call').addEventListener('click', (ev) => act(ev.target, $('tool-status'), callTool).then(() => { if (S && S.toolsStale) ev.target.disabled = true; }));
  $('hook-run').addEventListener('click', (ev) => act(ev.target, $('hook-status'), async () => {
    const r = await api('/api/hook', { text: $('hook-text').value });
    if (!r.ok) fill($('hook-result'), errorBox(r.error)); else await loadState();
    return r;
  }));
  $('auto-set').addEventListener('click', (ev) => act(ev.target, null, async () => {
    const r = await api('/api/auto-answer', { mode: $('auto-mode').value, text: $('auto-text').value });
    await loadState();
    return r;
  }));
  $('open-send').addEventListener('click', (ev) => act(ev.target, null, async () => {
    let address;
    if ($('open-address').value.trim()) {
      try { address = JSON.parse($('open-address').value); } catch (e) { fill($('channel-result'), errorBox('address is not JSON: ' + e.message)); return { ok: false }; }
    }
    const r = await api('/api/channels/open', { type: $('open-type').value, address });
    fill($('channel-result'), r.ok ? el('pre', { class: 'json', text: pretty(r.result) }) : errorBox(r.error));
    return r;
  }));
  $('man-refresh').addEventListener('click', (ev) => act(ev.target, $('man-status'), async () => {
    const r = await api('/api/manifest/refresh', {});
    text($('man-status'), r.ok ? (r.result.receipt ? 'changed' : 'unchanged') : r.error);
    await loadState();
    return r;
  }));
  $('check-run').addEventListener('click', (ev) => act(ev.target, null, async () => {
    const p = api('/api/check', {});
    scheduleState();
    const r = await p;
    await loadState();
    return r;
  }));
  $('raw-send').addEventListener('click', (ev) => act(ev.target, null, async () => {
    let params;
    try { params = JSON.parse($('raw-params').value || '{}'); } catch (e) { fill($('raw-result'), errorBox('params are not JSON: ' + e.message)); return { ok: false }; }
    const r = await api('/api/raw', { method: $('raw-method').value, params, notification: $('raw-notify').checked });
    fill($('raw-result'), r.ok ? el('pre', { class: 'json', text: pretty(r.result) }) : errorBox(r.error));
    return r;
  }));
  for (const id of ['log-method', 'log-dir', 'log-marked']) $(id).addEventListener('change', () => { logBefore = null; loadLog(); });
  $('log-method').addEventListener('input', () => { logBefore = null; scheduleLog(); });
  $('log-newest').addEventListener('click', () => { logBefore = null; loadLog(); });
  $('log-older').addEventListener('click', () => {
    if (logPage && logPage.entries.length && logPage.more) { logBefore = logPage.entries[0].seq; loadLog(); }
  });
}

wire();
connectEvents();
loadState().then(loadLog);
