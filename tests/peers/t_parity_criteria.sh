#!/bin/bash
# t_parity_criteria.sh — the parity verdicts themselves (parity_compare.mjs),
# on hand-made JSON: the noise-aware criteria must still fail what a real bug
# looks like.  Every case states the verdict it must give:
#   - llama.cpp noise 0.1 (tol 0.2): a flip where llama.cpp's gap is 0.05
#     passes; a flip where it is 0.5 fails, however rare;
#   - more narrow flips than twice llama.cpp's own (or the share allowed) fail;
#   - a greedy stream that diverges where llama.cpp's margin is within tol
#     passes with --noise, one that diverges at a wide margin fails, and
#     without --noise (strict models) any divergence fails.
# No engine runs here: ~1 s.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
CMP="$HERE/parity_compare.mjs"
TMP=${QWISP_TEST_TMP:-$(mktemp -d /tmp/qwisp-crit.XXXXXX)}/criteria
mkdir -p "$TMP"
if ! command -v node >/dev/null; then echo "FAIL: parity criteria: node is not installed"; exit 0; fi

# positions FILE SPEC... — SPEC per position "top1:gap" (top-2 id is top1+1)
positions() {
    local f=$1; shift
    node -e '
        const pos = process.argv.slice(2).map((s) => { const [t, g] = s.split(":").map(Number);
            return { top: [[t, -1], [t + 1, -1 - g], [t + 2, -5]] }; });
        console.log(JSON.stringify({ cpu_variant: "test", batch: 128, positions: pos }));' "$@" >"$f"
}
# verdict NAME WANT OUTPUT... — WANT is PASS or FAIL: the first PASS/FAIL line seen
verdict() {
    local name=$1 want=$2 got
    got=$(sed -n 's/^\(PASS\|FAIL\):.*/\1/p' "$3" | head -1)
    if [ "$got" = "$want" ]; then echo "PASS: parity criteria: $name gives $want"
    else echo "FAIL: parity criteria: $name gave '${got:-nothing}', wanted $want: $(head -3 "$3" | tr '\n' ' ')"; fi
}

# llama.cpp and an alternate that differs by 0.1 at one position, no flips
positions "$TMP/l.json" 10:1 20:0.05 30:0.5 40:1 50:1
node -e '
    const j = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    j.positions[0].top[1][1] += 0.1; j.cpu_variant = "alt"; console.log(JSON.stringify(j));' "$TMP/l.json" >"$TMP/alt.json"
node "$CMP" noise crit "$TMP/noise.json" "$TMP/l.json" "$TMP/alt.json" >"$TMP/noise.out"
grep -q 'noise floor 1.000e-1' "$TMP/noise.out" && echo "PASS: parity criteria: noise floor measured (0.1)" ||
    echo "FAIL: parity criteria: noise floor: $(cat "$TMP/noise.out")"

positions "$TMP/q_narrow.json" 10:1 21:0.05 30:0.5 40:1 50:1   # flips at pos 1 (gap 0.05)
positions "$TMP/q_wide.json" 10:1 20:0.05 31:0.5 40:1 50:1     # flips at pos 2 (gap 0.5)
positions "$TMP/q_many.json" 11:1 21:0.05 31:0.5 41:1 51:1     # flips everywhere
node "$CMP" tf "$TMP/q_narrow.json" "$TMP/l.json" narrow 0.5 "$TMP/noise.json" >"$TMP/o1"
verdict "a flip at a gap within llama.cpp's noise" PASS "$TMP/o1"
node "$CMP" tf "$TMP/q_wide.json" "$TMP/l.json" wide 0.5 "$TMP/noise.json" >"$TMP/o2"
verdict "a flip at a wide gap" FAIL "$TMP/o2"
node "$CMP" tf "$TMP/q_narrow.json" "$TMP/l.json" strict 1.0 >"$TMP/o3"
verdict "a flip on a strict model" FAIL "$TMP/o3"
# a looser tolerance so every flip is narrow: the count limit must still bite
node -e 'const f=require("fs"),j=JSON.parse(f.readFileSync(process.argv[1],"utf8")); j.tol=5; f.writeFileSync(process.argv[1], JSON.stringify(j));' "$TMP/noise.json"
node "$CMP" tf "$TMP/q_many.json" "$TMP/l.json" many 0.8 "$TMP/noise.json" >"$TMP/o4"
verdict "more flips than allowed, all narrow" FAIL "$TMP/o4"

# greedy: llama.cpp margins 1, 0.05, 0.5; tol 0.2
echo '{"prompt_ids":[1,2],"tokens":[5,6,7],"margins":[1,0.05,0.5]}' >"$TMP/lg.json"
echo '{"prompt_ids":[1,2],"tokens":[5,9,9]}' >"$TMP/qg_narrow.json"
echo '{"prompt_ids":[1,2],"tokens":[5,6,9]}' >"$TMP/qg_wide.json"
echo '{"delta":0.1,"tol":0.2,"self_flips":0,"n":5}' >"$TMP/noise_g.json"
node "$CMP" gen "$TMP/qg_narrow.json" "$TMP/lg.json" g --noise "$TMP/noise_g.json" | grep -v 'prompt ids' >"$TMP/o5"
verdict "greedy diverging at a narrow margin" PASS "$TMP/o5"
node "$CMP" gen "$TMP/qg_wide.json" "$TMP/lg.json" g --noise "$TMP/noise_g.json" | grep -v 'prompt ids' >"$TMP/o6"
verdict "greedy diverging at a wide margin" FAIL "$TMP/o6"
node "$CMP" gen "$TMP/qg_narrow.json" "$TMP/lg.json" g | grep -v 'prompt ids' >"$TMP/o7"
verdict "greedy diverging on a strict model" FAIL "$TMP/o7"
exit 0
