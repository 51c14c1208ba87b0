# llama_variants.sh — sourced by the parity scripts: llama.cpp's own noise on
# the machine at hand, so parity criteria hold on any x86-64 CPU.
#
# node-llama-cpp's prebuilt ships one libggml-cpu-<variant>.so per CPU family
# (zen4, sapphirerapids, icelake, haswell, ...) and ggml loads the best one
# the CPU can run.  The variants round differently (AMX tiles for plain
# matmuls on sapphirerapids, repacked K-quant GEMMs, VNNI or AVX2 dots), and
# llama.cpp's one-token path sums differently from its batched one, so on a
# chaotic generated model llama.cpp disagrees with itself at the positions
# where the top-1/top-2 gap is narrow.  What it outputs therefore depends on
# the CPU CI lands on; a parity check must measure that spread and require
# qwisp to stay inside it, not inside one variant's rounding.
#
# How another variant is forced: a copy of the binary package
# (@node-llama-cpp/linux-x64, ~30 MB) without the libraries to hide, every
# other package reached through a symlink, and node run with
# --preserve-symlinks so node-llama-cpp resolves the copy, not the original.
#
#   llama_variants_init TMPDIR
#       LLAMA_PRIMARY   the variant this CPU loads (e.g. zen4)
#       LLAMA_ALTS      "label|node command..." per alternate engine:
#                         next-best variant (the primary hidden), the AVX2
#                         baseline (haswell; only it and the generic x64
#                         library kept), both only where they differ from
#                         the primary; the one-token path is added by the
#                         caller (llama_ref --batch 1)
#   Prints "INFO: llama.cpp CPU variants: primary X, alternates Y Z".
#
# Finds tests/peers from its own path; T (a timeout prefix) may be set by the caller.

LLAMA_PEERS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
: "${T:=timeout 300}"

llama_bins_dir() {
    echo "$1/@node-llama-cpp/linux-x64/bins/linux-x64"
}

# make_alt_peer SRC_NODE_MODULES DEST KEEP_REGEX|"" HIDE...
# A node_modules tree at DEST/node_modules: symlinks to SRC's packages, a real
# copy of @node-llama-cpp/linux-x64 whose CPU libraries named in HIDE are
# removed (or, with KEEP_REGEX, every CPU library whose variant does not match).
make_alt_peer() {
    local src=$1 dest=$2 keep=$3 d n lib v
    shift 3
    rm -rf "$dest"; mkdir -p "$dest/node_modules/@node-llama-cpp" || return 1
    for d in "$src"/* "$src"/.bin; do
        [ -e "$d" ] || continue
        n=$(basename "$d")
        [ "$n" = "@node-llama-cpp" ] || ln -s "$d" "$dest/node_modules/$n"
    done
    for d in "$src"/@node-llama-cpp/*; do
        n=$(basename "$d")
        if [ "$n" = linux-x64 ]; then cp -a "$d" "$dest/node_modules/@node-llama-cpp/" || return 1
        else ln -s "$d" "$dest/node_modules/@node-llama-cpp/$n"; fi
    done
    for lib in "$(llama_bins_dir "$dest/node_modules")"/libggml-cpu-*.so; do
        v=${lib##*/libggml-cpu-}; v=${v%.so}
        if [ -n "$keep" ]; then [[ $v =~ $keep ]] || rm -f "$lib"
        else for n in "$@"; do [ "$v" = "$n" ] && rm -f "$lib"; done; fi
    done
    cp "$LLAMA_PEERS/llama_ref.mjs" "$dest/llama_ref.mjs"
}

variant_of() { # variant_of NODE_ARGS... SCRIPT — prints the variant it loads
    $T node "$@" --variant-only 2>/dev/null | sed -n 's/.*"cpu_variant":"\([^"]*\)".*/\1/p'
}

llama_variants_init() {
    local tmp=$1 nm="$LLAMA_PEERS/node_modules" alt v seen
    LLAMA_ALTS=()
    LLAMA_PRIMARY=$(variant_of "$LLAMA_PEERS/llama_ref.mjs")
    [ -n "$LLAMA_PRIMARY" ] || LLAMA_PRIMARY=unknown
    seen=" $LLAMA_PRIMARY "
    alt="$tmp/llama-next"
    if make_alt_peer "$nm" "$alt" "" "$LLAMA_PRIMARY"; then
        v=$(variant_of --preserve-symlinks "$alt/llama_ref.mjs")
        if [ -n "$v" ] && [[ $seen != *" $v "* ]]; then
            LLAMA_ALTS+=("$v|node --preserve-symlinks $alt/llama_ref.mjs"); seen+="$v "
        fi
    fi
    alt="$tmp/llama-avx2"
    if make_alt_peer "$nm" "$alt" '^(haswell|x64)$'; then
        v=$(variant_of --preserve-symlinks "$alt/llama_ref.mjs")
        if [ -n "$v" ] && [[ $seen != *" $v "* ]]; then
            LLAMA_ALTS+=("$v|node --preserve-symlinks $alt/llama_ref.mjs"); seen+="$v "
        fi
    fi
    local names=() a
    for a in "${LLAMA_ALTS[@]}"; do names+=("${a%%|*}"); done
    echo "INFO: llama.cpp CPU variants: primary $LLAMA_PRIMARY, alternates ${names[*]:-none} + the one-token path ($(grep -m1 'model name' /proc/cpuinfo | sed 's/.*: //'))"
}

# llama_noise_runs MODEL IDS PREFIX THREADS — teacher-forced runs of every
# alternate engine; prints the JSON files written (one per line).
llama_noise_runs() {
    local m=$1 ids=$2 prefix=$3 threads=$4 a label cmd k=0 out
    for a in "${LLAMA_ALTS[@]}"; do
        label=${a%%|*}; cmd=${a#*|}
        out="$prefix.alt$k.json"; k=$((k + 1))
        # shellcheck disable=SC2086
        $T $cmd --model "$m" --tokens "$ids" --teacher-force --top 10 --threads "$threads" >"$out" 2>"$out.err" &&
            echo "$out"
    done
    out="$prefix.alt-b1.json"
    $T node "$LLAMA_PEERS/llama_ref.mjs" --model "$m" --tokens "$ids" --teacher-force --top 10 --batch 1 \
        --threads "$threads" >"$out" 2>"$out.err" && echo "$out"
}
