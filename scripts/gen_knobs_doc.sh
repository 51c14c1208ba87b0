#!/bin/sh
# gen_knobs_doc.sh [BUILD] — rewrites the generated knob table in docs/knobs.md
# from `qwisp config --markdown` (tests/cli/t_knobs_doc.sh checks they agree).
set -eu
cd "$(dirname "$0")/.."
BIN=${1:-build}/qwisp
tmp=$(mktemp)
trap 'rm -f "$tmp" "$tmp.table"' EXIT # a failed run leaves docs/knobs.md as it was, and no temp files
"$BIN" config --markdown >"$tmp.table"
awk -v table="$tmp.table" '
    /^<!-- BEGIN generated/ { print; while ((getline l < table) > 0) print l; skip = 1; next }
    /^<!-- END generated/ { skip = 0 }
    !skip { print }' docs/knobs.md >"$tmp"
mv "$tmp" docs/knobs.md
echo "gen_knobs_doc: docs/knobs.md table regenerated"
