#!/bin/bash
# t_knobs_doc.sh — docs/knobs.md's knob table is exactly what the options
# table declares (`qwisp config --markdown`): a knob added, removed or changed
# in include/qwisp/options.h without regenerating the page
# (scripts/gen_knobs_doc.sh) fails here.  Also: every knob has a note.
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BIN=${QWISP_BIN:-$ROOT/build/qwisp}
DOC="$ROOT/docs/knobs.md"
TMP=${QWISP_TEST_TMP:-$(mktemp -d /tmp/qwisp-knobs.XXXXXX)}/knobs
mkdir -p "$TMP"
"$BIN" config --markdown >"$TMP/want" 2>"$TMP/err" || { echo "FAIL: knobs doc: qwisp config --markdown: $(cat "$TMP/err")"; exit 0; }
awk '/^<!-- BEGIN generated/ { on = 1; next } /^<!-- END generated/ { on = 0 } on' "$DOC" >"$TMP/got"
if [ ! -s "$TMP/got" ]; then echo "FAIL: knobs doc: no generated table between the markers in docs/knobs.md"
elif diff -u "$TMP/got" "$TMP/want" >"$TMP/diff"; then echo "PASS: docs/knobs.md table = qwisp config --markdown ($(grep -c '^| `' "$TMP/want") knobs)"
else echo "FAIL: docs/knobs.md table differs from qwisp config --markdown (run scripts/gen_knobs_doc.sh): $(head -8 "$TMP/diff" | tr '\n' ' ')"; fi
missing=""
for k in $(sed -n 's/^| `\(QWISP_[A-Z0-9_]*\)`.*/\1/p' "$TMP/want"); do
    grep -q "^- \`$k\`" "$DOC" || missing="$missing $k"
done
if [ -z "$missing" ]; then echo "PASS: every knob has a note in docs/knobs.md"
else echo "FAIL: docs/knobs.md has no note for:$missing"; fi
exit 0
