// Records a multi-turn session of a real coding agent against `kapitsa serve` on the demo model, as
// test data for the replay test (tests/server/agent_replay_test.cpp) and bench/bench_agent_session.
//
//   node record_session.mjs AGENT KAPITSA_BIN OUT.jsonl
//
// Two runs of the agent in one scratch repository, the second continuing the first's session
// (`--continue` / `exec resume --last`): each asks the agent to look at hello.py; the proxy forces the
// first model call of each run to call the agent's read tool (no agent forces one itself, and the demo
// model knows no tools), the agent runs it and sends the result, the model answers in one short
// sentence (tests/agents/short_reply.gbnf). So the session is: user → call → result → answer, twice.
// The read tool is narrowed to that file (narrowTools) in every request, so that the tools the prompt
// renders are the same on every turn, and the call reads a file that exists.
// OUT: one JSON line per model call, in order: {url, session (the headers that name the session),
// body (as the server got it), status, reply: {text, reasoning, toolCalls: [{name, arguments}], finish}}.
// Network: loopback only (private namespace) as in agent_turn.mjs. Not a ctest (recording takes
// minutes on the demo model; its output is kept packed in tests/fixtures/agents/).
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { AGENTS, agentBinPath, demoModel, enterPrivateNetwork, runProcess, scratchEnv, startServer } from "./harness.mjs";
import { generated, modelCalls, namedToolChoice, startRecorder } from "./recorder.mjs";

const [agent, kapitsaArg, outArg] = process.argv.slice(2);
const spec = AGENTS[agent];
if (!spec || !kapitsaArg || !outArg) {
  console.error("usage: record_session.mjs opencode|claude|codex|pi KAPITSA_BIN OUT.jsonl");
  process.exit(2);
}
const kapitsa = path.resolve(kapitsaArg), out = path.resolve(outArg);
if (!fs.existsSync(agentBinPath(spec))) {
  console.log(`${agentBinPath(spec)} missing (npm ci --prefix tests/agents)`);
  process.exit(77);
}
enterPrivateNetwork();

// pi's first run must keep its session (agent_turn.mjs runs it with --no-session).
const firstArgs = agent === "pi" ? (p) => ["-p", p] : spec.args;
const PROMPTS = ["Look at hello.py.", "Read hello.py again."];
const SESSION_HEADERS = ["x-session-affinity", "x-claude-code-session-id", "x-session-id", "session-id"];

const root = fs.mkdtempSync(path.join(os.tmpdir(), `kapitsa-record-${agent}-`));
const home = path.join(root, "home"), repo = path.join(root, "repo");
const helloPath = path.join(repo, "hello.py");

// The agent's read tool narrowed to reading hello.py: its path parameter an enum of the real file, its
// optional parameters removed (the demo model fills them with nonsense: pages "@lowercase(0.27…").
function narrowTools(tools) {
  return tools.map((t) => {
    if ((t.name ?? t.function?.name) !== spec.tool) return t;
    const copy = structuredClone(t);
    const schema = copy.input_schema ?? copy.parameters ?? copy.function?.parameters;
    const required = new Set(schema?.required ?? []);
    for (const [name, p] of Object.entries(schema?.properties ?? {})) {
      if (!required.has(name)) delete schema.properties[name];
      else if (p.type === "string" && /path/i.test(name)) p.enum = [helloPath];
      else if (p.type === "string") p.maxLength = 24;
    }
    return copy;
  });
}

async function main() {
  fs.mkdirSync(home, { recursive: true });
  fs.mkdirSync(repo);
  // PWD too: opencode takes its project folder from it (and asks permission for files outside).
  const env = { ...scratchEnv(home, spec), PWD: repo };
  spawnSync("git", ["init", "-q"], { cwd: repo, env });
  fs.writeFileSync(helloPath, 'print("hello")\n');
  const { server, port, log } = await startServer(kapitsa, env);
  let forceNext = false;
  const rewrite = (rec, body) => {
    if (!/\/v1\/(chat\/completions|responses|messages)/.test(rec.url) || !(body.tools ?? []).length) return null;
    const changed = { ...body, tools: narrowTools(body.tools) };
    if (forceNext) {
      forceNext = false;
      changed.tool_choice = namedToolChoice(rec.url, spec.tool);
      // A small budget for the forced reply: a call with a fixed path needs < 100 tokens.
      const budget = rec.url.startsWith("/v1/responses") ? "max_output_tokens" : "max_tokens";
      for (const key of ["max_tokens", "max_completion_tokens", "max_output_tokens"]) if (key in body) changed[key] = 512;
      if (!(budget in changed)) changed[budget] = 512;
    }
    return changed;
  };
  const recorder = await startRecorder(port, { rewrite });
  let failed = false;
  try {
    for (const [i, prompt] of PROMPTS.entries()) {
      forceNext = true;
      const args = [agent, "--model", demoModel, "--port", String(recorder.port), "--", ...(i === 0 ? firstArgs : spec.continueArgs)(prompt)];
      console.log(`$ kapitsa ${args.join(" ")}`);
      const r = await runProcess(kapitsa, args, { cwd: repo, env }, 900_000);
      console.log(`exit ${r.code} after ${r.seconds.toFixed(1)} s\n--- stdout ---\n${r.stdout.slice(-1000)}\n--- stderr (tail) ---\n${r.stderr.slice(-1500)}`);
      if (r.code !== 0) failed = true;
    }
  } finally {
    server.kill("SIGTERM");
    await recorder.close();
  }
  const lines = [];
  for (const c of modelCalls(recorder.records)) {
    const session = {};
    for (const h of SESSION_HEADERS) if (c.headers[h]) session[h] = c.headers[h];
    const reply = generated(c);
    for (const t of reply.toolCalls) delete t.callId;  // the server's ids: the agents echo them, the server makes new ones
    lines.push(JSON.stringify({ url: c.url, session, body: JSON.parse(c.body), status: c.status, reply }));
    const body = JSON.parse(c.body);
    console.log(`${c.url} -> ${c.status}: ${c.body.length} bytes, ${(body.tools ?? []).length} tools, ` +
                `${(body.messages ?? body.input ?? []).length} messages; reply ${JSON.stringify(reply.text.slice(0, 80))}, ` +
                `${reply.toolCalls.length} calls, finish ${reply.finish}`);
  }
  fs.writeFileSync(out, lines.join("\n") + "\n");
  console.log(`${lines.length} model calls written to ${out}`);
  if (failed || recorder.records.some((r) => r.status !== 200 && r.method === "POST")) {
    console.log(`--- kapitsa serve log (tail) ---\n${log().slice(-2000)}\nscratch folder kept: ${root}`);
    process.exit(1);
  }
  fs.rmSync(root, { recursive: true, force: true });
}

main().catch((e) => { console.error(e); process.exit(1); });
