#!/usr/bin/env bash
# ctest entry for the node tests: exit 77 (skipped) when node or the npm packages are missing.
# Usage: run_ctest.sh KAPITSA_BIN TEST_SERVER_BIN [load.mjs]   (default: the SDK tests)
set -u
here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v node >/dev/null 2>&1 || [ ! -d "$here/node_modules/openai" ] || [ ! -d "$here/node_modules/@anthropic-ai/sdk" ]; then
  echo "node or tests/server_js/node_modules missing (run npm ci --prefix tests/server_js): skipped"
  exit 77
fi
export KAPITSA_BIN="$1" KAPITSA_TEST_SERVER="$2"
if [ "${3:-}" = "load.mjs" ]; then exec node "$here/load.mjs"; fi
exec node --test --test-reporter=spec "$here/sdk.test.mjs"
