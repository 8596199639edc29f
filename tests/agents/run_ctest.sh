#!/usr/bin/env bash
# ctest entry for the agent tests: exit 77 (skipped) when node or the agents' npm packages are missing.
# Usage: run_ctest.sh AGENT KAPITSA_BIN [turn|schema]
set -u
here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v node >/dev/null 2>&1; then
  echo "node not found: skipped (install Node.js 20+, then npm ci --prefix tests/agents)"
  exit 77
fi
if ! command -v git >/dev/null 2>&1; then
  echo "git not found: skipped"
  exit 77
fi
exec node "$here/agent_turn.mjs" "$@"
