// What the agent scripts (agent_turn.mjs, record_session.mjs) share: the four agents' launch specs, the
// private network namespace, a scratch environment that keeps the caller's own agent setup out, child
// processes with a timeout, and `kapitsa serve` on the demo model with the short-reply grammar.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const here = path.dirname(fileURLToPath(import.meta.url));
export const repoRoot = path.resolve(here, "../..");
export const demoModel = path.join(repoRoot, "models", "demo", "target");

// tool: a harmless tool of the agent (reads a file). continueArgs: one more turn of the agent's last
// session (record_session.mjs).
export const AGENTS = {
  opencode: { bin: "opencode", env: "KAPITSA_OPENCODE_BIN", args: (p) => ["run", p], continueArgs: (p) => ["run", "--continue", p], tool: "read" },
  claude: { bin: "claude", env: "KAPITSA_CLAUDE_BIN", args: (p) => ["-p", p], continueArgs: (p) => ["-p", "--continue", p], tool: "Read" },
  codex: {
    bin: "codex", env: "KAPITSA_CODEX_BIN", args: (p) => ["exec", "--skip-git-repo-check", p],
    continueArgs: (p) => ["exec", "--skip-git-repo-check", "resume", "--last", p], tool: "view_image",
  },
  pi: { bin: "pi", env: "KAPITSA_PI_BIN", args: (p) => ["-p", "--no-session", p], continueArgs: (p) => ["-p", "--continue", p], tool: "read" },
};

export const agentBinPath = (spec) => path.join(here, "node_modules", ".bin", spec.bin);

// Re-runs this script inside a private network namespace (only loopback, brought up here) when
// unprivileged user namespaces are allowed (exits with its status); otherwise returns and the run
// relies on the launchers' offline switches and a dead npm registry.
export function enterPrivateNetwork() {
  if (process.env.KAPITSA_AGENT_NETNS) {
    console.log("network: private namespace, loopback only");
    return;
  }
  const probe = spawnSync("unshare", ["-rn", "sh", "-c", "ip link set lo up"], { stdio: "ignore" });
  if (probe.status === 0) {
    const r = spawnSync("unshare", ["-rn", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', process.execPath, ...process.argv.slice(1)],
                        { stdio: "inherit", env: { ...process.env, KAPITSA_AGENT_NETNS: "1" } });
    process.exit(r.status ?? 1);
  }
  console.log("note: unshare -rn is not available here; the run is not network-isolated (agents' offline switches only)");
}

// The environment for the agent and the server: HOME/XDG in `home`, no proxies, no registry.
export function scratchEnv(home, spec) {
  const env = { ...process.env };
  for (const k of Object.keys(env)) {
    // Nothing of the caller's own agent setup or proxies may leak in.
    if (/^(ANTHROPIC_|CLAUDE_|OPENAI_|CODEX_|OPENCODE_|PI_|KAPITSA_)/.test(k) || /^(https?|all|no)_proxy$/i.test(k)) delete env[k];
  }
  Object.assign(env, {
    HOME: home,
    XDG_CONFIG_HOME: path.join(home, ".config"),
    XDG_DATA_HOME: path.join(home, ".local", "share"),
    XDG_CACHE_HOME: path.join(home, ".cache"),
    XDG_STATE_HOME: path.join(home, ".local", "state"),
    NPM_CONFIG_REGISTRY: "http://127.0.0.1:9/",  // a dead port: no package downloads
    NO_PROXY: "127.0.0.1,localhost",
    PATH: `${path.dirname(process.execPath)}:${process.env.PATH ?? "/usr/bin:/bin"}`,  // node for the agents' scripts
    [spec.env]: agentBinPath(spec),
  });
  return env;
}

export function runProcess(cmd, args, opts, timeoutMs) {
  return new Promise((resolve) => {
    const t0 = Date.now();
    const p = spawn(cmd, args, { ...opts, stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "", stderr = "";
    p.stdout.on("data", (d) => { stdout += d; });
    p.stderr.on("data", (d) => { stderr += d; });
    const timer = setTimeout(() => { stderr += `\n[timeout after ${timeoutMs / 1000} s]`; p.kill("SIGTERM"); }, timeoutMs);
    p.on("exit", (code, signal) => {
      clearTimeout(timer);
      resolve({ code: code ?? 128 + (os.constants.signals[signal] ?? 0), stdout, stderr, seconds: (Date.now() - t0) / 1000 });
    });
  });
}

// `kapitsa serve` on the demo model, --no-think, with a grammar that makes every unconstrained reply
// one short sentence ending in EOS (the demo model would otherwise ramble, and Claude Code treats a
// reply cut at max_tokens as a failure). Resolves once /health answers 200.
export async function startServer(kapitsa, env) {
  const help = spawnSync(kapitsa, ["serve", "--help"], { encoding: "utf8" }).stdout ?? "";
  const args = ["serve", "--model", demoModel, "--port", "0", "--no-think"];
  if (help.includes("--grammar-file")) args.push("--grammar-file", path.join(here, "short_reply.gbnf"));
  else console.log("note: kapitsa serve has no --grammar-file yet; replies are unconstrained (slow, may hit max_tokens)");
  const server = spawn(kapitsa, args, { env, stdio: ["ignore", "pipe", "pipe"] });
  let log = "";
  const port = await new Promise((resolve, reject) => {
    const onData = (d) => {
      log += d;
      const m = /listening on http:\/\/[^:]+:(\d+)/.exec(log);
      if (m) resolve(Number(m[1]));
    };
    server.stdout.on("data", onData);
    server.stderr.on("data", (d) => { log += d; });
    server.on("exit", (c) => reject(new Error(`kapitsa serve exited (${c}):\n${log}`)));
  });
  for (let i = 0; i < 600; i++) {
    const ok = await fetch(`http://127.0.0.1:${port}/health`).then((r) => r.status === 200, () => false);
    if (ok) return { server, port, log: () => log };
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`kapitsa serve did not become ready:\n${log}`);
}
