// Loads the dashboard's app.js under a minimal DOM (converting as the DOM does: textContent,
// attributes and value take ToString of what they are given) and renders states a hostile
// server shaped. Exit 0 when every panel rendered; else prints what failed and exits 1.
'use strict';
const fs = require('fs');
const vm = require('vm');

class FakeNode {
  constructor(tag) {
    this.tagName = tag; this.children = []; this.attrs = {}; this._text = ''; this._value = '';
    this.className = ''; this.dataset = {}; this.checked = false; this.disabled = false;
  }
  append(...cs) { for (const c of cs) this.children.push(typeof c === 'string' ? text(c) : c); }
  get firstChild() { return this.children[0] || null; }
  removeChild(c) { this.children.splice(this.children.indexOf(c), 1); }
  set textContent(v) { this._text = String(v); this.children = []; }
  get textContent() { return this._text + this.children.map((c) => c.textContent).join(''); }
  set value(v) { this._value = String(v); }
  get value() { return this._value; }
  setAttribute(k, v) { this.attrs[k] = String(v); }
  addEventListener() {}
  closest() { return new FakeNode('li'); }
  querySelectorAll() { return []; }
}
function text(s) { const n = new FakeNode('#text'); n._text = String(s); return n; }
const ids = {};
const document = {
  createElement: (t) => new FakeNode(t),
  createTextNode: text,
  getElementById: (id) => (ids[id] = ids[id] || new FakeNode('div')),
  querySelectorAll: () => [],
  activeElement: null,
};
// render() draws each panel on its own and reports a panel that threw with console.error.
const panelErrors = [];
const ctx = {
  document, Node: FakeNode, location: { search: '?token=t' }, URLSearchParams,
  console: { log: console.log, error: (...a) => panelErrors.push(a.map(String).join(' ')) },
  fetch: () => new Promise(() => {}), EventSource: class { constructor() {} },
  setTimeout: () => 0, clearTimeout: () => {},
};
vm.createContext(ctx);
vm.runInContext(fs.readFileSync(process.argv[2], 'utf8'), ctx, { filename: 'app.js' });

// A value no String() can convert: ToPrimitive finds no callable toString or valueOf.
const H = { toString: 1, valueOf: 1 };
const hostileBlocks = [null, 7, H, { type: H }, { type: 'text', text: H },
  { type: 'image', data: 'AAAA', mimeType: H }, { type: 'image', data: 'AAAA', mimeType: 'image/svg+xml' },
  { type: 'resource', uri: 'x', resource: H }, { type: 'resource', uri: 'x', resource: { uri: H, text: H } },
  { type: 'resource', uri: 'x', resource: { uri: 'y', blob: H } }, { type: 'resource', uri: 'x', resource: { blob: { length: H } } }];

function baseState() {
  return {
    target: 'srv', eventCount: 0,
    connection: { phase: 'ready', generation: 1, mode: 'mcpl', protocolVersion: 'x', serverInfo: { name: 'n', version: 'v' } },
    grant: { vocabulary: ['push'], patterns: [], inForce: [], report: null, featureSets: {} },
    policy: null, tools: null, hooks: [], autoAnswer: 'off', pending: [], answered: [], events: [],
    channels: [], streams: [], manifest: null, manifestChanges: [], check: { running: false, last: null },
  };
}
const cases = {
  'tools that are not objects, and names and descriptions that are not strings': (s) => {
    s.connection.serverInfo = { name: H, version: H };
    s.connection.protocolVersion = H;
    s.tools = { tools: [null, 3, { name: H, description: H }, { name: 'ok', description: H, inputSchema: { properties: { a: null, b: H, c: { description: H, enum: [H] } }, required: H } }] };
  },
  'a tools list whose tools member is an object': (s) => { s.tools = { tools: { length: 1, 0: null } }; s.toolsNone = true; },
  'push content blocks of every hostile shape': (s) => {
    s.eventCount = 1;
    s.events = [{ kind: 'push', featureSet: 'f', eventId: 'e', seq: 1, generation: 1, time: 't', tags: ['a', H], wireTags: H,
      treatment: { behavior: H, rule: H }, params: { payload: { content: hostileBlocks } } }];
  },
  'channel messages and descriptors of hostile shapes': (s) => {
    s.eventCount = 1;
    s.events = [{ kind: 'channel', channelId: H, seq: 1, generation: 1, time: 't', message: { content: hostileBlocks } }];
    s.channels = [{ id: 'c', descriptor: { type: H, label: H, direction: H } }];
  },
  'hook injections, waiting requests and manifest changes of hostile shapes': (s) => {
    s.hooks = [{ inferenceId: 'i', consulted: ['s'], lifecycle: 'l', system: [{ server: 's', injection: { namespace: H, content: hostileBlocks } }],
      beforeUser: [], afterUser: [], rejected: [{ category: 'c', reason: H, injection: {} }], failures: [{ server: 's', detail: H }] }];
    s.answered = [{ method: 'inference/request', by: 'auto', since: 't', answer: { result: {} } }];
    s.manifest = { manifest: {}, declared: H, recomputed: H, matches: false };
    s.manifestChanges = [{ time: 't', receipt: { domains: [H], previousRevision: H, revision: H, impacts: [{ impact: H, disposition: H, subject: H, reason: H }] } }];
  },
  'a remembered hook run cut to its bound (each member a preview with its size)': (s) => {
    const cut = { truncated: true, bytes: 1048600, preview: '[{"server"' };
    s.hooks = [{ inferenceId: 'i', consulted: cut, lifecycle: 'l', truncated: true, system: cut,
      beforeUser: cut, afterUser: [], rejected: cut, failures: cut, params: cut }];
  },
};
let failed = 0;
for (const [name, make] of Object.entries(cases)) {
  for (const k of Object.keys(ids)) delete ids[k];
  // The tool panel draws the form of the tool selected: select the one named `ok`.
  document.getElementById('tool-select').value = 'ok';
  const s = baseState();
  make(s);
  panelErrors.length = 0;
  try {
    ctx.__state = s;
    vm.runInContext('S = __state; render(S);', ctx);
    if (panelErrors.length) throw new Error(panelErrors.join('; '));
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}: render threw ${e && e.stack}`);
    continue;
  }
  // The panels after the hostile part still rendered: the check panel is the last one.
  const formDrawn = !s.tools || s.toolsNone || ids['tool-form'].children.length > 0;
  if (ids['check-status'] === undefined || !formDrawn) { failed++; console.log(`FAIL ${name}: a panel was not drawn`); }
  else console.log(`ok ${name}`);
}
// A block of each hostile shape, one at a time, as the tool-result panel renders them.
for (const b of hostileBlocks) {
  try { ctx.contentNodes([b]); } catch (e) { failed++; console.log(`FAIL content block ${JSON.stringify(b)}: ${e}`); }
}
process.exit(failed ? 1 : 0);
