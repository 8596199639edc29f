#!/usr/bin/env bash
# ctest entry for the chat page's tests. Exit 77 (skipped, with the reason) when what a test needs is
# missing: node; for the browser test also Chromium (Debian's `chromium`) and playwright-core
# (npm ci --prefix tests/browser); scripts/install-test-deps.sh installs both.
# Usage: run_ctest.sh markdown | run_ctest.sh page KAPITSA_BIN SCREENSHOT_DIR
set -u
here="$(cd "$(dirname "$0")" && pwd)"
if ! command -v node >/dev/null 2>&1; then echo "node is not installed: skipped"; exit 77; fi
if [ "$1" = "markdown" ]; then exec node --test --test-reporter=spec "$here/markdown.test.mjs"; fi
chromium="${CHROMIUM_BIN:-$(command -v chromium || true)}"
if [ -z "$chromium" ]; then echo "no chromium (apt-get install chromium, or scripts/install-test-deps.sh): skipped"; exit 77; fi
if [ ! -d "$here/node_modules/playwright-core" ]; then
  echo "tests/browser/node_modules missing (npm ci --prefix tests/browser): skipped"
  exit 77
fi
export KAPITSA_BIN="$2" KAPITSA_ARTIFACTS="$3" CHROMIUM_BIN="$chromium"
exec node --test --test-reporter=spec "$here/page.test.mjs"
