#!/usr/bin/env bash
# t_include_direction.sh — includes point down the layers only (docs/architecture.md):
#
#   rank 0  base
#   rank 1  format, kernels, memory
#   rank 2  text, model, experts, offline
#   rank 3  runtime, cuda (the CUDA backend object: implements backend.h, nothing includes it)
#   rank 4  serve, ab
#   rank 5  cli
#
# A file may include its own layer's headers and those of lower ranks.  Across one rank
# only the pairs in SIDEWAYS are allowed (one way each): model -> experts (the forward
# pass pulls experts from a source; experts/ knows only a layout, never qw_model) and
# offline -> text (the writers put a tokenizer in the files they write).  Second rule:
# src/model/ and include/qwisp/model.h reach the kernels through qwisp/ops.h only, the
# seam a second backend plugs into.
#
# Layers come from the path (src/<layer>/...) and, for public headers, from the map
# HEADER_LAYER below: a header missing from it fails the check, so a new one gets a
# layer when it is added.  Run from the repository root (tests/run.sh does).
set -u
cd "$(dirname "$0")/../.." || exit 1

declare -A RANK=([base]=0 [format]=1 [kernels]=1 [memory]=1 [text]=2 [model]=2 [experts]=2
                 [offline]=2 [runtime]=3 [cuda]=3 [serve]=4 [ab]=4 [cli]=5)
SIDEWAYS=" model>experts offline>text "
declare -A HEADER_LAYER=(
    [base.h]=base [options.h]=base [stats.h]=base
    [gguf.h]=format [safetensors.h]=format
    [quant.h]=kernels [ops.h]=kernels [threadpool.h]=kernels [tune.h]=kernels
    [pool.h]=memory [footprint.h]=memory [memdbg.h]=memory [sysmem.h]=memory
    [tokenizer.h]=text [sampler.h]=text [textout.h]=text [json_constraint.h]=text [tool_calls.h]=text
    [model.h]=model [backend.h]=model [host_experts.h]=model [route_profile.h]=model [experts.h]=experts
    [convert.h]=offline [gen_model.h]=offline [gguf_meta.h]=offline
    [generate.h]=runtime [sched.h]=runtime [run_memory.h]=runtime [place.h]=runtime
    [serve.h]=serve [ab.h]=ab
)

bad=0
fail() { echo "FAIL: $*"; bad=$((bad + 1)); }

layer_of_file() {   # path -> layer ("" = not checked)
    case $1 in
        src/*/*) local d=${1#src/}; echo "${d%%/*}" ;;
        include/qwisp/*) echo "${HEADER_LAYER[${1##*/}]:-?}" ;;
    esac
}

n_files=0 n_incl=0
while IFS= read -r f; do
    from=$(layer_of_file "$f")
    [ -n "$from" ] || continue
    if [ "$from" = "?" ]; then fail "$f: public header without a layer (add it to HEADER_LAYER)"; continue; fi
    [ -n "${RANK[$from]:-}" ] || { fail "$f: folder '$from' has no rank (add it to RANK)"; continue; }
    n_files=$((n_files + 1))
    while IFS=: read -r line inc; do
        n_incl=$((n_incl + 1))
        case $inc in
            qwisp/*) to=${HEADER_LAYER[${inc#qwisp/}]:-?} ;;
            */*) to=${inc%%/*} ;;
            *) continue ;;   # a private header of the same folder
        esac
        if [ "$to" = "?" ] || [ -z "${RANK[$to]:-}" ]; then
            fail "$f:$line includes \"$inc\", whose layer is unknown"; continue
        fi
        if [ "${RANK[$to]}" -gt "${RANK[$from]}" ]; then
            fail "$f:$line: $from (rank ${RANK[$from]}) includes \"$inc\" of $to (rank ${RANK[$to]}): an upward include"
        elif [ "${RANK[$to]}" -eq "${RANK[$from]}" ] && [ "$to" != "$from" ] && [[ $SIDEWAYS != *" $from>$to "* ]]; then
            fail "$f:$line: $from includes \"$inc\" of $to, a sideways include not in SIDEWAYS"
        fi
        if { [[ $f == src/model/* ]] || [ "$f" = include/qwisp/model.h ]; } && [ "$to" = kernels ] && [ "$inc" != qwisp/ops.h ]; then
            fail "$f:$line: model/ includes \"$inc\": it reaches the kernels through qwisp/ops.h only"
        fi
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" | sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1:\2/')
done < <(find src include/qwisp -name '*.[ch]' | sort)

if [ "$bad" -eq 0 ]; then
    echo "PASS: includes point down the layers ($n_files files, $n_incl includes; model/ reaches kernels through ops.h)"
fi
[ "$bad" -eq 0 ]
