#!/usr/bin/env bash
# Installs what Kapitsa needs to build and run on Debian 12 (apt-get; sudo when not root). The tests'
# extra packages (the SDKs and coding agents from npm) come from scripts/install-test-deps.sh.
set -euo pipefail
packages=(
  build-essential g++ cmake ninja-build pkg-config git xz-utils zstd
  nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev libutf8proc-dev libcpp-httplib-dev libsimdjson-dev
  libcurl4-openssl-dev libssl-dev
  libgtest-dev libgmock-dev libbenchmark-dev
)
bash "$(dirname "$0")/apt-install.sh" "${packages[@]}"
