// The chat page's logic: conversations kept in localStorage, the model list from /v1/models, replies
// streamed from /v1/chat/completions (SSE, stream_options.include_usage for the token counts), shown as
// Markdown (markdown.js) with the reasoning folded and tool calls as cards, a stop button that aborts
// the request (the server then cancels the generation), and per reply: decode tokens/s (the server's
// `timings`), time to first token (as seen here), prompt and cached prompt tokens. With `kapitsa serve --api-key` the first 401 asks for the
// key once; it is kept in localStorage and sent as a Bearer token. All model and server text reaches
// the DOM through textContent or the escaping Markdown renderer.
import { renderMarkdown } from './markdown.js';

const $ = (id) => document.getElementById(id);
const store = {
  get(key, fallback) {
    try { const v = localStorage.getItem(`kapitsa.${key}`); return v === null ? fallback : JSON.parse(v); } catch { return fallback; }
  },
  set(key, value) {
    try { localStorage.setItem(`kapitsa.${key}`, JSON.stringify(value)); } catch (e) { notice(`Could not save in local storage: ${e.message}`); }
  },
};

// A message: {role: 'user'|'assistant', content, reasoning?, toolCalls?: [{name, arguments}],
// stats?, error?, stopped?, finish?}. A chat: {id, title, messages}.
let chats = store.get('chats', []);
let currentId = store.get('current', null);
const settings = { temperature: '', maxTokens: '', seed: '', thinking: true, system: '', model: '', ...store.get('settings', {}) };
let apiKey = store.get('apiKey', '');
let streaming = null;  // {controller} while a reply streams

const current = () => chats.find((c) => c.id === currentId) ?? null;
const saveChats = () => { store.set('chats', chats); store.set('current', currentId); };

function notice(text) {
  let el = document.querySelector('.notice');
  if (!el) {
    el = document.createElement('div');
    el.className = 'notice';
    $('log').before(el);
  }
  el.textContent = text;
  el.hidden = !text;
}

// ---- server calls ----

function headers() {
  const h = { 'content-type': 'application/json' };
  if (apiKey) h.authorization = `Bearer ${apiKey}`;
  return h;
}

// "400 invalid_request_error: messages is required" from an error response of any shape.
async function errorText(res) {
  const text = await res.text().catch(() => '');
  try {
    const e = JSON.parse(text).error;
    if (e && typeof e === 'object') return `${res.status} ${e.type ?? res.statusText}: ${e.message ?? text}`;
    if (typeof e === 'string') return `${res.status}: ${e}`;
  } catch {}
  return `${res.status} ${res.statusText}${text ? `: ${text.slice(0, 500)}` : ''}`;
}

// Shows the key form; resolves once a key was entered (and saved).
let keyWaiters = [];
function askKey(message) {
  $('key-message').textContent = message;
  $('key-form').hidden = false;
  $('key').focus();
  return new Promise((resolve) => keyWaiters.push(resolve));
}
$('key-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  apiKey = $('key').value.trim();
  if (!apiKey) return;
  store.set('apiKey', apiKey);
  $('key').value = '';
  $('key-form').hidden = true;
  const waiters = keyWaiters;
  keyWaiters = [];
  waiters.forEach((w) => w());
});
$('forget-key').addEventListener('click', () => { apiKey = ''; store.set('apiKey', ''); });

// fetch() that asks for the key on 401 and tries again with it.
async function call(path, init = {}) {
  for (;;) {
    const res = await fetch(path, { ...init, headers: headers() });
    if (res.status !== 401) return res;
    const why = (await errorText(res)).replace(/^401 \w+: /, '');
    await askKey(apiKey ? `The server rejected this key (${why}). API key:` : `This server needs an API key (${why}).`);
  }
}

async function loadModels() {
  const select = $('model');
  for (;;) {
    try {
      const res = await call('/v1/models');
      if (res.ok) {
        const ids = (await res.json()).data.map((m) => m.id);
        select.replaceChildren(...ids.map((id) => new Option(id, id)));
        select.value = ids.includes(settings.model) ? settings.model : ids[0];
        notice('');
        return;
      }
      notice(`Listing models failed: ${await errorText(res)} (retrying)`);
    } catch (e) {
      notice(`Cannot reach the server: ${e.message} (retrying)`);
    }
    await new Promise((r) => setTimeout(r, 2000));
  }
}

// ---- sending and streaming ----

function requestBody(chat) {
  const messages = [];
  if (settings.system.trim()) messages.push({ role: 'system', content: settings.system });
  for (const m of chat.messages) {
    if (m.role === 'assistant' && !m.content && (m.error || m.stopped)) continue;
    messages.push({ role: m.role, content: m.content });
  }
  const body = {
    model: $('model').value, messages, stream: true, stream_options: { include_usage: true },
    chat_template_kwargs: { enable_thinking: settings.thinking },
  };
  if (settings.temperature !== '') body.temperature = Number(settings.temperature);
  if (settings.maxTokens !== '') body.max_tokens = Number(settings.maxTokens);
  if (settings.seed !== '') body.seed = Number(settings.seed);
  return body;
}

// Reads an SSE body, calling onData with each parsed `data:` JSON until [DONE].
async function readEvents(res, onData) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf('\n\n')) >= 0) {
      const frame = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      for (const line of frame.split('\n')) {
        if (!line.startsWith('data:')) continue;  // comments (keep-alive) and event names
        const data = line.slice(5).trim();
        if (data === '[DONE]') return;
        onData(JSON.parse(data));
      }
    }
  }
}

async function send(text) {
  if (streaming) return;
  let chat = current();
  if (!chat) {
    chat = { id: `${Date.now()}-${Math.random().toString(36).slice(2, 8)}`, title: '', messages: [] };
    chats.unshift(chat);
    currentId = chat.id;
  }
  if (!chat.title) chat.title = text.slice(0, 60);
  chat.messages.push({ role: 'user', content: text });
  const msg = { role: 'assistant', content: '', reasoning: '', toolCalls: [] };
  const body = requestBody(chat);
  chat.messages.push(msg);
  saveChats();
  renderAll();
  const view = lastView();

  const controller = new AbortController();
  streaming = { controller };
  setStreaming(true);
  const t0 = performance.now();
  let tFirst = 0, deltas = 0, usage = null, timings = null;
  const redraw = () => { if (!redraw.pending) { redraw.pending = true; requestAnimationFrame(() => { redraw.pending = false; view.update(msg); }); } };
  try {
    const res = await call('/v1/chat/completions', { method: 'POST', body: JSON.stringify(body), signal: controller.signal });
    if (!res.ok) throw new Error(await errorText(res));
    await readEvents(res, (j) => {
      if (j.error) { msg.error = `${j.error.type ?? 'error'}: ${j.error.message ?? JSON.stringify(j.error)}`; return; }
      if (j.usage) usage = j.usage;
      if (j.timings) timings = j.timings;  // the server's clock (llama.cpp's names)
      const choice = j.choices?.[0];
      if (!choice) return;
      const d = choice.delta ?? {};
      const got = (d.content ?? '') + (d.reasoning_content ?? '') !== '' || (d.tool_calls?.length ?? 0) > 0;
      if (d.content) msg.content += d.content;
      if (d.reasoning_content) msg.reasoning += d.reasoning_content;
      for (const tc of d.tool_calls ?? []) {
        const t = (msg.toolCalls[tc.index ?? 0] ??= { name: '', arguments: '' });
        if (tc.function?.name) t.name += tc.function.name;
        if (tc.function?.arguments) t.arguments += tc.function.arguments;
      }
      if (got) { deltas++; if (!tFirst) tFirst = performance.now(); }
      if (choice.finish_reason) msg.finish = choice.finish_reason;
      redraw();
    });
    if (!msg.finish && !msg.error) msg.error = 'The reply ended without a finish reason (the server closed the stream).';
  } catch (e) {
    if (e.name === 'AbortError') msg.stopped = true;
    else msg.error = e instanceof TypeError ? `Connection failed: ${e.message}` : e.message;
  }
  const tEnd = performance.now();
  if (tFirst) {
    const tokens = usage?.completion_tokens ?? deltas;  // without usage (stopped): one delta ≈ one token
    msg.stats = {
      tokens, exact: !!usage, ttftMs: tFirst - t0,
      // Decode speed: the server's, else the tokens after the first over the time after the first
      // here (network batching makes that one rough).
      tokensPerSecond: timings?.predicted_per_second > 0 ? timings.predicted_per_second
        : tokens > 1 && tEnd > tFirst ? ((tokens - 1) * 1000) / (tEnd - tFirst) : null,
      promptTokens: usage?.prompt_tokens ?? null,
      cachedTokens: usage?.prompt_tokens_details?.cached_tokens ?? null,
      reasoningTokens: usage?.completion_tokens_details?.reasoning_tokens ?? null,
    };
  }
  streaming = null;
  setStreaming(false);
  saveChats();
  view.update(msg);
  renderChats();
}

function setStreaming(on) {
  $('send').hidden = on;
  $('stop').hidden = !on;
  document.body.classList.toggle('streaming', on);
}
$('stop').addEventListener('click', () => streaming?.controller.abort());

// ---- rendering ----

function statsText(msg) {
  const s = msg.stats;
  const parts = [];
  if (s) {
    parts.push(`${s.exact ? '' : '~'}${s.tokens} tokens`);
    if (s.tokensPerSecond !== null) parts.push(`${s.tokensPerSecond.toFixed(1)} tok/s`);
    parts.push(`first token ${Math.round(s.ttftMs)} ms`);
    if (s.promptTokens !== null) parts.push(`prompt ${s.promptTokens} tokens (${s.cachedTokens ?? 0} cached)`);
  }
  if (msg.stopped) parts.push('stopped');
  else if (msg.finish === 'length') parts.push('cut at max tokens');
  return parts.join(' · ');
}

function div(cls, parent) {
  const el = document.createElement('div');
  el.className = cls;
  parent.append(el);
  return el;
}

// One message's element; update() redraws it from the message (keeps the reasoning fold's state).
function messageView(msg) {
  const el = document.createElement('div');
  el.className = `msg ${msg.role}`;
  if (msg.role === 'user') {
    el.textContent = msg.content;
    return { el, update() {} };
  }
  const reasoning = document.createElement('details');
  reasoning.className = 'reasoning';
  const summary = document.createElement('summary');
  const reasoningBody = document.createElement('div');
  reasoningBody.className = 'md';
  reasoning.append(summary, reasoningBody);
  el.append(reasoning);
  const tools = div('tools', el), content = div('md content', el), error = div('error', el), stats = div('stats', el);
  const update = (m) => {
    const live = el.classList.toggle('live', m === streamingMessage());
    reasoning.hidden = !m.reasoning;
    summary.textContent = live && !m.content && !m.toolCalls?.length ? 'Thinking…'
      : m.stats?.reasoningTokens ? `Thought (${m.stats.reasoningTokens} tokens)` : 'Thought';
    reasoningBody.innerHTML = renderMarkdown(m.reasoning ?? '');
    tools.replaceChildren(...(m.toolCalls ?? []).map((t) => {
      const card = document.createElement('div');
      card.className = 'tool-card';
      const name = div('tool-name', card);
      name.textContent = `Tool call: ${t.name}`;
      const args = document.createElement('pre');
      try { args.textContent = JSON.stringify(JSON.parse(t.arguments), null, 2); } catch { args.textContent = t.arguments; }
      card.append(args);
      return card;
    }));
    content.innerHTML = renderMarkdown(m.content ?? '');
    error.hidden = !m.error;
    error.textContent = m.error ?? '';
    stats.textContent = statsText(m);
    const log = $('log');
    if (log.scrollHeight - log.scrollTop - log.clientHeight < 120) log.scrollTop = log.scrollHeight;
  };
  update(msg);
  return { el, update };
}

function streamingMessage() {
  if (!streaming) return null;
  const c = current();
  return c ? c.messages[c.messages.length - 1] : null;
}

let views = [];
const lastView = () => views[views.length - 1];

function renderAll() {
  renderChats();
  const log = $('log');
  const chat = current();
  views = (chat?.messages ?? []).map(messageView);
  if (views.length) log.replaceChildren(...views.map((v) => v.el));
  else {
    const empty = document.createElement('p');
    empty.className = 'empty';
    empty.textContent = 'Send a message to start a conversation.';
    log.replaceChildren(empty);
  }
  log.scrollTop = log.scrollHeight;
}

function renderChats() {
  $('chats').replaceChildren(...chats.map((c) => {
    const li = document.createElement('li');
    li.classList.toggle('active', c.id === currentId);
    const open = document.createElement('button');
    open.type = 'button';
    open.className = 'open';
    open.textContent = c.title || 'New chat';
    open.addEventListener('click', () => { if (streaming) return; currentId = c.id; saveChats(); renderAll(); document.body.classList.remove('show-sidebar'); });
    const del = document.createElement('button');
    del.type = 'button';
    del.className = 'delete';
    del.textContent = '×';
    del.setAttribute('aria-label', 'Delete conversation');
    del.addEventListener('click', () => {
      if (streaming) return;
      chats = chats.filter((x) => x !== c);
      if (currentId === c.id) currentId = null;
      saveChats();
      renderAll();
    });
    li.append(open, del);
    return li;
  }));
}

// ---- controls ----

function bindSetting(id, key, prop = 'value') {
  const el = $(id);
  el[prop] = settings[key];
  el.addEventListener('change', () => { settings[key] = el[prop]; store.set('settings', settings); });
}
bindSetting('temperature', 'temperature');
bindSetting('max-tokens', 'maxTokens');
bindSetting('seed', 'seed');
bindSetting('thinking', 'thinking', 'checked');
bindSetting('system', 'system');
bindSetting('model', 'model');

$('toggle-settings').addEventListener('click', () => {
  const s = $('settings');
  s.hidden = !s.hidden;
  $('toggle-settings').setAttribute('aria-expanded', String(!s.hidden));
});
$('toggle-sidebar').addEventListener('click', () => document.body.classList.toggle('show-sidebar'));
$('new-chat').addEventListener('click', () => {
  if (streaming) return;
  currentId = null;
  saveChats();
  renderAll();
  document.body.classList.remove('show-sidebar');
  $('input').focus();
});
$('composer').addEventListener('submit', (ev) => {
  ev.preventDefault();
  const text = $('input').value.trim();
  if (!text || streaming) return;
  $('input').value = '';
  send(text);
});
$('input').addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); $('composer').requestSubmit(); }
});
$('log').addEventListener('click', (ev) => {
  const button = ev.target.closest('button.copy');
  if (!button) return;
  const code = button.closest('.code').querySelector('code').textContent;
  navigator.clipboard?.writeText(code).then(() => { button.textContent = 'Copied'; setTimeout(() => { button.textContent = 'Copy'; }, 1200); },
                                           () => { button.textContent = 'Copy failed'; });
});

renderAll();
loadModels();
