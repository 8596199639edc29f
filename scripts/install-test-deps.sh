#!/usr/bin/env bash
# Installs what only the tests need, after scripts/install-deps.sh: clang with its sanitizer and libFuzzer
# runtimes (the sanitizer pass, scripts/test-sanitized.sh), Chromium with playwright-core from npm (the
# chat page's browser test, tests/browser), the official OpenAI / Anthropic SDKs and the four coding
# agents from npm (~1.2 GB). Without npm or a registry the tests that use them are skipped
# (exit 77), never failed; this script still succeeds.
set -euo pipefail
bash "$(dirname "$0")/apt-install.sh" clang libclang-rt-14-dev chromium
# The official OpenAI / Anthropic SDKs for tests/server_js (npm ci; --prefer-offline uses the npm cache
# when there is no network). Without node/npm the SDK tests are skipped, not failed.
js="$(dirname "$0")/../tests/server_js"
if command -v npm >/dev/null 2>&1 && [ -f "$js/package-lock.json" ] && [ ! -d "$js/node_modules" ]; then
  (cd "$js" && npm ci --no-audit --no-fund --prefer-offline) || echo "kapitsa: npm ci in tests/server_js failed; the SDK tests will be skipped"
fi
# playwright-core (14 MB, no dependencies) drives Debian's chromium for tests/browser; it downloads no
# browser of its own.
browser="$(dirname "$0")/../tests/browser"
if command -v npm >/dev/null 2>&1 && [ -f "$browser/package-lock.json" ] && [ ! -d "$browser/node_modules" ]; then
  (cd "$browser" && npm ci --no-audit --no-fund --prefer-offline) || echo "kapitsa: npm ci in tests/browser failed; the browser test will be skipped"
fi
# The four coding agents for tests/agents (exact versions in its package-lock.json; ~1.2 GB, 1-2 min).
# Install scripts must run: opencode-ai's postinstall puts its native binary in place.
# `npm install --no-save` when `npm ci` refuses the lock: it lists opencode's native package for
# linux-x64 only (the registry it was made from had no other platform's), which npm ci calls out of sync.
# No npm or no registry: the agent tests are skipped (exit 77), install-deps still succeeds.
agents="$(dirname "$0")/../tests/agents"
if command -v npm >/dev/null 2>&1 && [ -f "$agents/package-lock.json" ] && [ ! -d "$agents/node_modules" ]; then
  (cd "$agents" && { npm ci --no-audit --no-fund --prefer-offline 2>/dev/null ||
                     npm install --no-save --no-audit --no-fund --prefer-offline; }) ||
    echo "kapitsa: npm install in tests/agents failed; the agent tests will be skipped"
fi
