// Load test against a real `kapitsa serve` (demo model): 50 concurrent streaming clients over chat
// completions, responses and messages, every third hanging up mid-stream, for a bounded time. Passes
// when every completed stream is well-formed (its API's full ending), the server still answers
// /health afterwards and exits 0 on SIGTERM. Usage: KAPITSA_BIN=build/kapitsa node load.mjs
import { spawn } from 'node:child_process';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const KAPITSA = process.env.KAPITSA_BIN ?? join(here, '..', '..', 'build', 'kapitsa');
const CLIENTS = Number(process.env.CLIENTS ?? 50);
const MODEL = 'kapitsa-test';

const proc = spawn(KAPITSA, ['serve', '--port', '0', '--alias', MODEL, '--ctx', '2048', '--parallel', '16'],
                   { stdio: ['ignore', 'pipe', 'inherit'] });
const base = await new Promise((resolve, reject) => {
  let out = '';
  proc.stdout.on('data', (d) => { out += d; const m = out.match(/listening on (http:\/\/[0-9.]+:\d+)/); if (m) resolve(m[1]); });
  proc.on('exit', (c) => reject(new Error(`server exited ${c}`)));
});
for (let i = 0; ; i++) {
  try { if ((await fetch(`${base}/health`)).status === 200) break; } catch {}
  if (i > 1200) throw new Error('never healthy');
  await new Promise((r) => setTimeout(r, 100));
}

const user = [{ role: 'user', content: 'Write a function that adds numbers.' }];
const apis = [
  { path: '/v1/chat/completions', body: { model: MODEL, messages: user, max_tokens: 40, stream: true, stream_options: { include_usage: true } },
    ok: (t) => /"finish_reason":"(stop|length)"/.test(t) && t.trimEnd().endsWith('data: [DONE]') },
  { path: '/v1/responses', body: { model: MODEL, input: user, max_output_tokens: 40, stream: true },
    ok: (t) => /event: response\.output_item\.done/.test(t) && /event: response\.completed\n[^\n]*\n\n$/.test(t) },
  { path: '/v1/messages', body: { model: MODEL, messages: user, max_tokens: 40, stream: true },
    ok: (t) => /event: content_block_stop/.test(t) && /event: message_delta/.test(t) && /event: message_stop\n[^\n]*\n\n$/.test(t) },
];

const t0 = Date.now();
const results = await Promise.all(Array.from({ length: CLIENTS }, async (_, i) => {
  const api = apis[i % 3];
  const hangUp = i % 3 === Math.floor(i / 3) % 3;
  const ctrl = new AbortController();
  try {
    const res = await fetch(base + api.path, { method: 'POST', headers: { 'content-type': 'application/json' },
                                               body: JSON.stringify(api.body), signal: ctrl.signal });
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let text = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      text += dec.decode(value, { stream: true });
      if (hangUp && text.length > 0) { ctrl.abort(); return 'dropped'; }
    }
    return api.ok(text) ? 'ok' : `malformed ${api.path}: ${text.slice(-300)}`;
  } catch (e) {
    return hangUp ? 'dropped' : `error ${api.path}: ${e}`;
  }
}));
const secs = (Date.now() - t0) / 1000;
const ok = results.filter((r) => r === 'ok').length, dropped = results.filter((r) => r === 'dropped').length;
const bad = results.filter((r) => r !== 'ok' && r !== 'dropped');
const health = (await fetch(`${base}/health`)).status;
const metrics = await (await fetch(`${base}/metrics`)).text();
proc.kill('SIGTERM');
const code = await new Promise((r) => proc.on('exit', r));
console.log(`load: ${CLIENTS} clients in ${secs.toFixed(1)} s: ${ok} well-formed, ${dropped} hung up, ${bad.length} bad; ` +
            `health ${health}; server exit ${code}`);
console.log(metrics.split('\n').filter((l) => /^kapitsa_(completion_tokens_total|client_disconnects_total|decode_tokens_per_second)/.test(l)).join('\n'));
for (const b of bad) console.log(b);
process.exit(bad.length === 0 && health === 200 && code === 0 && ok + dropped === CLIENTS ? 0 : 1);
