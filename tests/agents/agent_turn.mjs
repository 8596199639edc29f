// End-to-end: one non-interactive turn of a real coding agent through its launcher
// (`kapitsa opencode|claude|codex|pi`) against the demo model, with no network but loopback.
//
//   node agent_turn.mjs AGENT KAPITSA_BIN [turn|schema|tool]
//
// The test starts `kapitsa serve` itself (so it controls the server's options) behind a recording
// proxy, and points the launcher at the proxy's port: the launcher finds a server for the same model
// there and reuses it. The proxy shows what the agent sent and what the server generated; the test
// asserts the agent exits 0 and prints exactly what the model generated. Scratch HOME / XDG folders
// and an empty git repository keep the agents away from any real configuration. When the system
// allows it (unshare -rn), everything runs in a private network namespace that has only loopback.
// "tool": no agent forces a tool call by itself (docs/agents.md), so the proxy adds a tool_choice
// naming one of the agent's tools to its first request; the server must emit a well-formed call, the
// agent must run the tool and send its result back in the next request.
// Exit 77 (skipped) when node_modules is missing. Prints the agent's wall time.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { AGENTS, agentBinPath, demoModel as model, enterPrivateNetwork, runProcess as run, scratchEnv as makeEnv, startServer as serve } from "./harness.mjs";
import { carriesToolResult, generated, modelCalls, namedToolChoice, startRecorder } from "./recorder.mjs";

const [agent, kapitsaArg, mode = "turn"] = process.argv.slice(2);
const kapitsa = kapitsaArg && path.resolve(kapitsaArg);
// "schema": structured output through the agent. Only Codex can ask for it in a one-turn run
// (`codex exec --output-schema FILE` sends text.format json_schema; Claude Code's --json-schema only
// offers a StructuredOutput tool, without tool_choice). A bounded schema, so the reply ends quickly.
const SCHEMA = {
  type: "object",
  properties: { greeting: { enum: ["hello", "hi", "hey"] }, friendly: { type: "boolean" } },
  required: ["greeting", "friendly"],
  additionalProperties: false,
};
const validates = (v) => v !== null && typeof v === "object" && !Array.isArray(v) &&
  Object.keys(v).length === 2 && SCHEMA.properties.greeting.enum.includes(v.greeting) && typeof v.friendly === "boolean";
const spec = AGENTS[agent] && { ...AGENTS[agent] };
if (mode === "schema" && spec) {
  if (agent !== "codex") {
    console.error("schema mode: only codex asks for structured output in a one-turn run");
    process.exit(2);
  }
  spec.args = (p) => ["exec", "--skip-git-repo-check", "--output-schema", path.join(root, "schema.json"), p];
}
if (!spec || !kapitsa) {
  console.error("usage: agent_turn.mjs opencode|claude|codex|pi KAPITSA_BIN [turn|schema|tool]");
  process.exit(2);
}
const agentBin = agentBinPath(spec);
if (!fs.existsSync(agentBin)) {
  console.log(`${agentBin} missing (run npm ci --prefix tests/agents; scripts/install-test-deps.sh does): skipped`);
  process.exit(77);
}

enterPrivateNetwork();

const PROMPT = "hello";
const root = fs.mkdtempSync(path.join(os.tmpdir(), `kapitsa-agent-${agent}-`));
const home = path.join(root, "home");
const repo = path.join(root, "repo");
const failures = [];
const check = (ok, what) => { if (!ok) failures.push(what); console.log(`${ok ? "ok  " : "FAIL"} ${what}`); };

const scratchEnv = () => makeEnv(home, spec);
const startServer = (env) => serve(kapitsa, env);

const normalize = (s) => s.replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "").replace(/\s+/g, " ").trim();

async function main() {
  fs.mkdirSync(home, { recursive: true });
  fs.mkdirSync(repo);
  const env = scratchEnv();
  spawnSync("git", ["init", "-q"], { cwd: repo, env });
  fs.writeFileSync(path.join(repo, "hello.py"), 'print("hello")\n');
  fs.writeFileSync(path.join(root, "schema.json"), JSON.stringify(SCHEMA));

  const { server, port, log } = await startServer(env);
  let forced = false;
  const rewrite = mode !== "tool" ? null : (rec, body) => {
    if (!/\/v1\/(chat\/completions|responses|messages)/.test(rec.url) || !(body.tools ?? []).length) return null;
    // Strings of at most 24 characters in the forced tool's arguments: the demo model would otherwise
    // fill a path with text until max_tokens (the agent then gets a cut-off call it cannot run). The
    // same tools in every request, as the agent sent them each time: a tool list that changed after
    // the first request would make the next one prefill its prompt again from the changed tool on.
    const tools = body.tools.map((t) => {
      if ((t.name ?? t.function?.name) !== spec.tool) return t;
      const copy = structuredClone(t);
      const schema = copy.input_schema ?? copy.parameters ?? copy.function?.parameters;
      for (const p of Object.values(schema?.properties ?? {})) if (p.type === "string") p.maxLength = 24;
      return copy;
    });
    if (forced) return { ...body, tools };
    forced = true;
    // A small output budget for the forced reply (a call with short arguments needs < 100 tokens),
    // so that a reply that goes astray fails in seconds instead of running to the agent's budget.
    const budget = {};
    for (const key of ["max_tokens", "max_completion_tokens", "max_output_tokens"]) if (key in body) budget[key] = 512;
    if (!Object.keys(budget).length) budget[rec.url.startsWith("/v1/responses") ? "max_output_tokens" : "max_tokens"] = 512;
    return { ...body, ...budget, tools, tool_choice: namedToolChoice(rec.url, spec.tool) };
  };
  const recorder = await startRecorder(port, { rewrite });
  let result;
  try {
    const args = [agent, "--model", model, "--port", String(recorder.port), "--", ...spec.args(PROMPT)];
    console.log(`$ kapitsa ${args.join(" ")}`);
    result = await run(kapitsa, args, { cwd: repo, env }, 900_000);
  } finally {
    server.kill("SIGTERM");
    await recorder.close();
  }
  console.log(`--- agent stdout ---\n${result.stdout}\n--- agent stderr (tail) ---\n${result.stderr.slice(-3000)}\n---`);
  const calls = modelCalls(recorder.records);
  for (const c of calls) {
    let body = {};
    try { body = JSON.parse(c.body); } catch { /* recorded as is */ }
    const g = generated(c);
    const names = (body.tools ?? []).map((t) => t.name ?? t.function?.name ?? t.type).join(",");
    console.log(`request ${c.method} ${c.url} -> ${c.status}: ${c.body.length} bytes, tools [${names}], ` +
                `tool_choice ${JSON.stringify(body.tool_choice)}, ${((c.ended ?? Date.now()) - c.started) / 1000} s, ` +
                `prompt ${g.prompt.tokens ?? "?"} tokens (${g.prompt.cached ?? "?"} from the cache); ` +
                `reply ${JSON.stringify(g.text.slice(0, 200))}, ${g.reasoning.length} reasoning chars, ` +
                `${g.toolCalls.length} tool calls, finish ${g.finish}`);
  }
  console.log(`agent wall time: ${result.seconds.toFixed(1)} s (${agent}, ${calls.length} model calls)`);

  check(result.code === 0, `kapitsa ${agent} exited 0 (got ${result.code})`);
  check(/using the server already running/.test(result.stderr), "the launcher reused the test's server");
  check(calls.length > 0 && calls.every((c) => c.status === 200), "every model call answered 200");
  // The agent's answer is the reply to its last request that offered tools (opencode's parallel
  // title request offers none).
  const main = [...calls].reverse().find((c) => { try { return (JSON.parse(c.body).tools ?? []).length > 0; } catch { return false; } });
  check(main !== undefined, "a model call offered the agent's tools");
  if (agent === "codex" && main) {
    // The launcher's model catalog entry (apply_patch_tool_type "freeform") is what makes Codex offer it.
    const tools = JSON.parse(main.body).tools ?? [];
    check(tools.some((t) => t.type === "custom" && t.name === "apply_patch"), "codex offers its apply_patch tool (model catalog)");
  }
  if (main) {
    const reply = normalize(generated(main).text);
    check(reply.length > 0, `the model generated a reply (${JSON.stringify(reply.slice(0, 120))})`);
    check(normalize(result.stdout).includes(reply), "the agent printed the model's reply");
    if (mode === "tool") {
      const first = calls.find((c) => c.originalBody !== undefined);
      const forcedReply = first ? generated(first) : null;
      const call = forcedReply?.toolCalls[0];
      check(call?.name === spec.tool, `the forced first reply called ${spec.tool} (got ${JSON.stringify(call)}, finish ${forcedReply?.finish}` +
            (forcedReply?.reasoning ? `, after ${forcedReply.reasoning.length} characters of reasoning: the forced-call grammar let the model think first` : "") + ")");
      let args;
      try { args = JSON.parse(call?.arguments ?? ""); } catch { args = undefined; }
      check(args !== null && typeof args === "object", "its arguments are a JSON object");
      const later = calls.slice(calls.indexOf(first) + 1);
      const followUp = call?.callId && later.find((c) => { try { return carriesToolResult(JSON.parse(c.body), call.callId); } catch { return false; } });
      check(Boolean(followUp), "the agent ran the tool and sent its result back to the model");
      // The agent's history comes back unchanged: the prefix cache serves all of the forced request's
      // prompt (and the reply's echo, folded after it), only the tool result is prefilled.
      const before = forcedReply?.prompt.tokens, cached = followUp ? generated(followUp).prompt.cached : undefined;
      check(before !== undefined && cached >= before,
            `the request with the tool result took the forced request's whole prompt from the prefix cache (${cached} cached, that prompt ${before} tokens)`);
    }
    if (mode === "schema") {
      let format = null;
      try { format = JSON.parse(main.body).text?.format ?? null; } catch { /* checked below */ }
      check(format?.type === "json_schema", `the agent asked for a JSON schema (text.format ${JSON.stringify(format)?.slice(0, 80)})`);
      let value;
      try { value = JSON.parse(generated(main).text); } catch { value = undefined; }
      check(validates(value), "the reply is JSON valid against the schema");
    }
  }
  if (failures.length) {
    console.log(`--- kapitsa serve log (tail) ---\n${log().slice(-2000)}`);
    fs.writeFileSync(path.join(root, "records.json"), JSON.stringify(recorder.records, null, 1));
    console.log(`FAILED: ${failures.length} check(s); scratch folder kept: ${root}`);
    process.exit(1);
  }
  fs.rmSync(root, { recursive: true, force: true });
  console.log("PASSED");
}

main().catch((e) => { console.error(e); process.exit(1); });
