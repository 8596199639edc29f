#!/usr/bin/env bash
# The launchers without the real agents (no npm needed): a fake agent script stands in for each one
# (KAPITSA_<AGENT>_BIN) and prints what it was given. Checks, for `kapitsa opencode|claude|codex|pi`
# starting its own server from the demo model: the agent's arguments, environment and temporary files
# point at a live server; the agent's exit code comes back; SIGTERM to the launcher reaches the agent;
# afterwards the server is stopped and the temporary folder is gone; a missing agent gives 127 and the
# npm command. Usage: launcher_test.sh KAPITSA_BIN
set -u
kapitsa="$1"
here="$(cd "$(dirname "$0")" && pwd)"
model="$here/../../models/demo/target"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
export TMPDIR="$scratch/tmp" HOME="$scratch/home"
mkdir -p "$TMPDIR" "$HOME"
unset KAPITSA_API_KEY ANTHROPIC_API_KEY
failures=0
check() {  # check DESCRIPTION COMMAND...
  if "${@:2}"; then echo "ok   $1"; else echo "FAIL $1"; failures=$((failures + 1)); fi
}

# The fake agent: records argv, the relevant environment and the files it was pointed at, checks that
# the server answers, then exits with $FAKE_EXIT (or waits for SIGTERM when FAKE_WAIT is set).
fake="$scratch/fake-agent"
cat > "$fake" <<'EOF'
#!/usr/bin/env bash
out="$FAKE_OUT"
printf '%s\n' "$@" > "$out.args"
env | grep -E '^(OPENCODE_|ANTHROPIC_|CLAUDE_|DISABLE_|PI_|KAPITSA_CODEX_)' | sort > "$out.env"
url=""
for a in "$@"; do
  case "$a" in
    *.mjs|*.json) [ -f "$a" ] && cat "$a" > "$out.file" ;;
    model_catalog_json=*) f="${a#model_catalog_json=}"; f="${f%\"}"; f="${f#\"}"; cat "$f" > "$out.file" ;;
  esac
done
url="$(grep -oE 'http://127\.0\.0\.1:[0-9]+' "$out.args" "$out.env" "$out.file" 2>/dev/null | head -1 | sed 's/^[^h]*//')"
echo "$url" > "$out.url"
if curl -sf "$url/health" > /dev/null 2>&1 || (exec 3<>"/dev/tcp/127.0.0.1/${url##*:}") 2>/dev/null; then echo up > "$out.health"; fi
if [ -n "${FAKE_WAIT:-}" ]; then
  trap 'echo TERM > "$out.signal"; exit 42' TERM
  sleep 60 & wait
fi
exit "${FAKE_EXIT:-0}"
EOF
chmod +x "$fake"

run_launcher() {  # run_launcher AGENT OUT [agent args...]: launcher exit code in $code
  local agent="$1" out="$2"
  shift 2
  local var="KAPITSA_$(echo "$agent" | tr a-z A-Z)_BIN"
  env "$var=$fake" FAKE_OUT="$out" FAKE_EXIT=7 "$kapitsa" "$agent" --model "$model" -- "$@" > "$out.stdout" 2> "$out.stderr"
  code=$?
}

server_gone() { ! curl -sf "$(cat "$1.url")/health" > /dev/null 2>&1 && ! (exec 3<>"/dev/tcp/127.0.0.1/$(sed 's/.*://' "$1.url")") 2>/dev/null; }
no_temp_left() { [ -z "$(ls -A "$TMPDIR")" ]; }

for agent in opencode claude codex pi; do
  out="$scratch/$agent"
  run_launcher "$agent" "$out" one-turn-arg
  check "$agent: the agent's exit code (7) comes back" [ "$code" = 7 ]
  check "$agent: the user's argument reaches the agent last" [ "$(tail -1 "$out.args" 2>/dev/null)" = one-turn-arg ]
  check "$agent: the server was up while the agent ran" [ -f "$out.health" ]
  check "$agent: the launcher stopped the server it started" server_gone "$out"
  check "$agent: the temporary folder is removed" no_temp_left
done

grep -q '^OPENCODE_DISABLE_MODELS_FETCH=1$' "$scratch/opencode.env"; check "opencode: models.dev fetch off" [ $? = 0 ]
grep -q '"baseURL":"http://127.0.0.1:[0-9]*/v1"' "$scratch/opencode.env"; check "opencode: OPENCODE_CONFIG_CONTENT has the provider's baseURL" [ $? = 0 ]
grep -q '"model":"kapitsa/demo"' "$scratch/opencode.env"; check "opencode: the model is kapitsa/demo" [ $? = 0 ]
grep -q '^ANTHROPIC_BASE_URL=http://127.0.0.1:[0-9]*$' "$scratch/claude.env"; check "claude: ANTHROPIC_BASE_URL is the bare origin" [ $? = 0 ]
grep -q '^ANTHROPIC_MODEL=demo$' "$scratch/claude.env" && grep -q '^ANTHROPIC_DEFAULT_HAIKU_MODEL=demo$' "$scratch/claude.env"
check "claude: every model role is the served id" [ $? = 0 ]
grep -q '^CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1$' "$scratch/claude.env" && grep -q '^DISABLE_TELEMETRY=1$' "$scratch/claude.env"
check "claude: nonessential traffic and telemetry off" [ $? = 0 ]
grep -q '^model_provider="kapitsa"$' "$scratch/codex.args" && grep -q '^analytics.enabled=false$' "$scratch/codex.args"
check "codex: -c overrides for the provider and analytics" [ $? = 0 ]
grep -q '"apply_patch_tool_type": "freeform"' "$scratch/codex.file" && grep -q '"slug": "demo"' "$scratch/codex.file"
check "codex: the model catalog offers apply_patch for the served id" [ $? = 0 ]
grep -q 'registerProvider("kapitsa"' "$scratch/pi.file" && grep -q '"contextWindow": 32768' "$scratch/pi.file"
check "pi: the extension registers the provider with the server's context window" [ $? = 0 ]
grep -qx -- '--provider' "$scratch/pi.args" && grep -q '^PI_OFFLINE=1$' "$scratch/pi.env"; check "pi: --provider kapitsa, offline" [ $? = 0 ]

# SIGTERM to the launcher reaches the agent; its exit code (42) comes back; the server stops.
out="$scratch/signal"
KAPITSA_PI_BIN="$fake" FAKE_OUT="$out" FAKE_WAIT=1 "$kapitsa" pi --model "$model" > "$out.stdout" 2> "$out.stderr" &
launcher=$!
for _ in $(seq 100); do [ -f "$out.health" ] && break; sleep 0.1; done
sleep 0.3
kill -TERM "$launcher"
wait "$launcher"
code=$?
check "SIGTERM is forwarded to the agent" [ "$(cat "$out.signal" 2>/dev/null)" = TERM ]
check "the agent's exit code after SIGTERM (42) comes back" [ "$code" = 42 ]
check "the server is stopped after SIGTERM" server_gone "$out"

# A missing agent: 127 and the npm command, before any server starts.
PATH=/nonexistent "$kapitsa" claude > "$scratch/missing.stdout" 2> "$scratch/missing.stderr"
code=$?
check "a missing agent exits 127" [ "$code" = 127 ]
grep -q 'npm install -g @anthropic-ai/claude-code' "$scratch/missing.stderr"; check "and says how to install it" [ $? = 0 ]
check "and started no server" [ -z "$(ls -A "$TMPDIR")" ]

if [ "$failures" -gt 0 ]; then
  for f in "$scratch"/*.stderr; do echo "--- $f"; tail -5 "$f"; done
  echo "FAILED: $failures check(s)"
  exit 1
fi
echo PASSED
