#!/usr/bin/env bash
# Installs what Kapitsa needs to build and run on Debian 12 (apt-get; sudo when not root). The tests'
# extra packages (the SDKs and coding agents from npm) come from scripts/install-test-deps.sh.
set -euo pipefail
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
packages=(
  build-essential g++ cmake ninja-build pkg-config git xz-utils zstd
  nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev libutf8proc-dev libcpp-httplib-dev libsimdjson-dev
  libcurl4-openssl-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "kapitsa: installing ${missing[*]}"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${missing[@]}"
fi
