// Drives `kapitsa serve` (the bundled demo model) and the scripted server (test_server's FakeServe,
// for deterministic tool calls) with the official SDKs: openai (chat completions streaming and not,
// responses streaming, tool-call round trips incl. a custom apply_patch tool) and @anthropic-ai/sdk
// (messages streaming and not, tool_use round trip, count_tokens).
// Run: KAPITSA_BIN=build/kapitsa KAPITSA_TEST_SERVER=build/tests/test_server node --test tests/server_js/
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, dirname } from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const here = dirname(fileURLToPath(import.meta.url));
const repo = join(here, '..', '..');
const KAPITSA = process.env.KAPITSA_BIN ?? join(repo, 'build', 'kapitsa');
const TEST_SERVER = process.env.KAPITSA_TEST_SERVER ?? join(repo, 'build', 'tests', 'test_server');
const MODEL = 'kapitsa-test';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let real, fake;  // {proc, base}

async function waitHealthy(base, ms = 120000) {
  const t0 = Date.now();
  while (Date.now() - t0 < ms) {
    try {
      const r = await fetch(`${base}/health`);
      if (r.status === 200) return;
    } catch {}
    await sleep(100);
  }
  throw new Error(`${base} never became healthy`);
}

async function startReal() {
  const proc = spawn(KAPITSA, ['serve', '--port', '0', '--alias', MODEL, '--ctx', '1024', '--parallel', '4'],
                     { stdio: ['ignore', 'pipe', 'inherit'] });
  const base = await new Promise((resolve, reject) => {
    let out = '';
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[0-9.]+:\d+)/);
      if (m) resolve(m[1]);
    });
    proc.on('exit', (code) => reject(new Error(`kapitsa serve exited with ${code}`)));
  });
  await waitHealthy(base);
  return { proc, base };
}

async function startFake() {
  const dir = mkdtempSync(join(tmpdir(), 'kapitsa-fake-'));
  const portFile = join(dir, 'port');
  const proc = spawn(TEST_SERVER, ['--gtest_filter=FakeServe.Run'],
                     { stdio: ['pipe', 'ignore', 'inherit'], env: { ...process.env, KAPITSA_FAKE_SERVE: portFile } });
  for (let i = 0; i < 600 && !existsSync(portFile); i++) await sleep(50);
  let port = '';
  for (let i = 0; i < 100 && !/\d+\n/.test(port); i++) { port = readFileSync(portFile, 'utf8'); await sleep(20); }
  const base = `http://127.0.0.1:${port.trim()}`;
  await waitHealthy(base);
  return { proc, base };
}

before(async () => { [real, fake] = await Promise.all([startReal(), startFake()]); });
after(async () => {
  if (real) { real.proc.kill('SIGTERM'); }
  if (fake) { fake.proc.stdin.end(); }
  const exited = (p) => new Promise((r) => (p.exitCode !== null ? r(p.exitCode) : p.on('exit', r)));
  if (real) assert.equal(await exited(real.proc), 0, 'kapitsa serve exits 0 on SIGTERM');
  if (fake) await exited(fake.proc);
});

const openai = (s) => new OpenAI({ baseURL: `${s.base}/v1`, apiKey: 'dummy', maxRetries: 0 });
const anthropic = (s) => new Anthropic({ baseURL: s.base, apiKey: 'dummy', maxRetries: 0 });

test('models lists the alias with its context length', async () => {
  const page = await openai(real).models.list();
  assert.equal(page.data[0].id, MODEL);
  assert.equal(page.data[0].context_length, 1024);
});

test('chat completions, not streamed', async () => {
  const r = await openai(real).chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'Write a Python function.' }], max_tokens: 24, temperature: 0,
  });
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
  assert.ok(r.usage.prompt_tokens > 0 && r.usage.completion_tokens > 0);
});

test('chat completions, streamed with usage (helper and raw iteration)', async () => {
  const client = openai(real);
  const stream = client.chat.completions.stream({
    model: MODEL, messages: [{ role: 'developer', content: 'You are terse.' }, { role: 'user', content: [{ type: 'text', text: 'hi' }] }],
    max_completion_tokens: 20, stream_options: { include_usage: true }, chat_template_kwargs: { enable_thinking: false },
  });
  const final = await stream.finalChatCompletion();
  assert.ok(['stop', 'length'].includes(final.choices[0].finish_reason));

  const raw = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: 'hello' }], max_tokens: 12, stream: true, stream_options: { include_usage: true },
  });
  let finish = null, usage = null, chunks = 0;
  for await (const c of raw) {
    chunks++;
    if (c.choices.length && c.choices[0].finish_reason) finish = c.choices[0].finish_reason;
    if (c.usage) usage = c.usage;
  }
  assert.ok(chunks >= 2);
  assert.ok(['stop', 'length'].includes(finish));
  assert.ok(usage && usage.completion_tokens > 0);
});

test('completions (raw prompt)', async () => {
  const r = await openai(real).completions.create({ model: MODEL, prompt: 'def add(a, b):', max_tokens: 10, temperature: 0 });
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
});

test('responses, streamed', async () => {
  const stream = openai(real).responses.stream({
    model: MODEL, input: [{ role: 'developer', content: 'Be brief.' }, { role: 'user', content: 'hello' }], max_output_tokens: 24,
  });
  const types = [];
  stream.on('event', (e) => types.push(e.type));
  const final = await stream.finalResponse();
  assert.equal(types[0], 'response.created');
  assert.ok(types.includes('response.output_item.done'));
  assert.ok(['response.completed'].includes(types.at(-1)));
  assert.ok(['completed', 'incomplete'].includes(final.status));
  assert.ok(final.usage.total_tokens > 0);
});

test('anthropic messages, not streamed and streamed', async () => {
  const client = anthropic(real);
  const m = await client.messages.create({ model: MODEL, max_tokens: 20, messages: [{ role: 'user', content: 'hi' }] });
  assert.equal(m.type, 'message');
  assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason));
  assert.ok(m.content.length >= 1);
  const stream = client.messages.stream({
    model: MODEL, max_tokens: 32000, system: [{ type: 'text', text: 'x-anthropic-billing-header: cch=1;' }, { type: 'text', text: 'Be brief.' }],
    messages: [{ role: 'user', content: [{ type: 'text', text: 'hello' }] }],
  });
  const final = await stream.finalMessage();
  assert.ok(['end_turn', 'max_tokens'].includes(final.stop_reason));
  assert.ok(final.usage.output_tokens > 0);
});

test('anthropic count_tokens', async () => {
  const r = await anthropic(real).messages.countTokens({ model: MODEL, messages: [{ role: 'user', content: 'count me' }] });
  assert.ok(r.input_tokens > 3);
});

test('errors reach the SDKs as typed errors', async () => {
  await assert.rejects(openai(real).chat.completions.create({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }),
                       (e) => e.status === 404);
  await assert.rejects(anthropic(real).messages.create({ model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: 'word '.repeat(5000) }] }),
                       (e) => e.status === 400 && /prompt is too long/.test(e.message));
});

const weatherTool = {
  type: 'function',
  function: { name: 'get_weather', description: 'Weather forecast', parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] } },
};

test('chat completions tool-call round trip (streamed)', async () => {
  const client = openai(fake);
  const messages = [{ role: 'user', content: 'Weather in Paris?' }];
  const stream = client.chat.completions.stream({ model: MODEL, messages, tools: [weatherTool] });
  const first = await stream.finalChatCompletion();
  assert.equal(first.choices[0].finish_reason, 'tool_calls');
  const call = first.choices[0].message.tool_calls[0];
  assert.equal(call.function.name, 'get_weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris', days: 3 });
  messages.push(first.choices[0].message, { role: 'tool', tool_call_id: call.id, content: 'sunny' });
  const second = await client.chat.completions.create({ model: MODEL, messages, tools: [weatherTool] });
  assert.equal(second.choices[0].finish_reason, 'stop');
  assert.match(second.choices[0].message.content, /done/);
});

test('responses function call and custom apply_patch round trip', async () => {
  const client = openai(fake);
  const tools = [{ type: 'function', name: 'get_weather', parameters: weatherTool.function.parameters, strict: false }, { type: 'web_search' }];
  const input = [{ role: 'user', content: 'Weather?' }];
  const r1 = await client.responses.stream({ model: MODEL, input, tools }).finalResponse();
  const fc = r1.output.find((o) => o.type === 'function_call');
  assert.ok(fc, JSON.stringify(r1.output));
  assert.deepEqual(JSON.parse(fc.arguments), { city: 'Paris', days: 3 });
  input.push(...r1.output, { type: 'function_call_output', call_id: fc.call_id, output: 'sunny' });
  const r2 = await client.responses.stream({ model: MODEL, input, tools }).finalResponse();
  assert.match(r2.output_text, /done/);

  const patchTools = [{ type: 'custom', name: 'apply_patch', description: 'Edit files', format: { type: 'grammar', syntax: 'lark', definition: 'start: x' } }];
  const r3 = await client.responses.stream({ model: MODEL, input: 'add hello.txt', tools: patchTools }).finalResponse();
  const ctc = r3.output.find((o) => o.type === 'custom_tool_call');
  assert.ok(ctc, JSON.stringify(r3.output));
  assert.match(ctc.input, /^\*\*\* Begin Patch\n\*\*\* Add File: hello.txt/);
});

test('anthropic tool_use round trip (streamed and not)', async () => {
  const client = anthropic(fake);
  const tools = [{ name: 'get_weather', description: 'Weather', input_schema: weatherTool.function.parameters }];
  const messages = [{ role: 'user', content: 'Weather in Paris?' }];
  const first = await client.messages.stream({ model: MODEL, max_tokens: 1000, tools, messages }).finalMessage();
  assert.equal(first.stop_reason, 'tool_use');
  assert.deepEqual(first.content.map((b) => b.type), ['thinking', 'text', 'tool_use']);
  const use = first.content.find((b) => b.type === 'tool_use');
  assert.deepEqual(use.input, { city: 'Paris', days: 3 });
  messages.push({ role: 'assistant', content: first.content },
                { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny' }] });
  const second = await client.messages.create({ model: MODEL, max_tokens: 1000, tools, messages });
  assert.equal(second.stop_reason, 'end_turn');
  assert.match(second.content.find((b) => b.type === 'text').text, /done/);
});
