#!/bin/bash
# t_cli_usage.sh — what a first-time user meets: bounded prompt input and
# context, random seeds, the chat commands, default models, token text,
# --echo, output order under 2>&1, gen-model's report, --version, the bench
# roofline wording, help and docs free of internal history, the README's
# convert types, QWISP_LOG in config, LICENSE and `make install`.
# Every command runs under `timeout`, on the shipped models/default.gguf or a
# tiny generated model; the whole script takes well under a minute.
set -u
Q=${QWISP_BIN:?QWISP_BIN not set}
T=${QWISP_TEST_TMP:-/tmp}/cli_usage
mkdir -p "$T"
D=models/default.gguf
TO="timeout 60"

pass() { echo "PASS: $1"; }
fail() { echo "FAIL: $1"; }
# check NAME CONDITION-EXIT-STATUS DETAIL
check() { if [ "$2" -eq 0 ]; then pass "$1"; else fail "$1 ($3)"; fi; }

# expect NAME WANT_RC PATTERN -- command...   (stdout + stderr matched)
expect() {
    local name=$1 want_rc=$2 pat=$3; shift 4
    local out rc
    out=$($TO "$@" 2>&1); rc=$?
    if [ "$rc" -eq "$want_rc" ] && echo "$out" | grep -qE -- "$pat"; then
        pass "$name"
    else
        fail "$name (rc=$rc, want $want_rc; output: $(echo "$out" | head -3 | cut -c1-200))"
    fi
}

# ---- item 12: bounded prompt input and context ----
expect "run: --prompt-file /dev/zero refused" 1 "/dev/zero: not a regular file" -- "$Q" run -m "$D" --prompt-file /dev/zero -n 1
expect "run: --prompt-file of a directory refused" 1 "not a regular file \(a directory\)" -- "$Q" run -m "$D" --prompt-file "$T" -n 1
head -c $((65 << 20)) /dev/zero | tr '\0' 'a' >"$T/big.txt"
expect "run: --prompt-file capped at 64 MiB" 1 "big.txt: larger than the [0-9]+ bytes allowed" -- "$Q" run -m "$D" --prompt-file "$T/big.txt" -n 1
rm -f "$T/big.txt"
expect "run: --prompt-file from a pipe still works" 0 '"gen_tokens":1' -- \
    bash -c "\"$Q\" run -m \"$D\" --prompt-file <(echo 'In the beginning') -n 1 --ignore-eos --json"
expect "run: prompt longer than --ctx refused" 2 "prompt is 5000 tokens but the context holds 4096 \(--ctx\)" -- \
    "$Q" run -m "$D" --prompt-tokens 5000 --ctx 4096 -n 1
expect "run: prompt longer than QWISP_CTX refused" 2 "context holds 256 \(QWISP_CTX\)" -- \
    env QWISP_CTX=256 "$Q" run -m "$D" --prompt-tokens 300 -n 1
expect "run: --prompt-tokens 100000 refused by default" 2 "prompt is 100000 tokens but the context holds 4096" -- \
    "$Q" run -m "$D" --prompt-tokens 100000 -n 1
out=$($TO "$Q" run -m "$D" -p "In the beginning" -n 100000 --ctx 40 --ignore-eos --json 2>"$T/cut.err"); rc=$?
g=$(echo "$out" | python3 -c 'import json,sys; print(json.load(sys.stdin)["gen_tokens"])' 2>/dev/null)
check "run: -n 100000 cut to the --ctx room" $([ "$rc" -eq 0 ] && [ "$g" = 37 ] && grep -q -- "-n 100000 cut to 37: the context holds 40 tokens (--ctx)" "$T/cut.err"; echo $?) \
    "rc=$rc gen=$g err=$(head -c 200 "$T/cut.err")"
"$Q" gen-model --preset tiny --n-ctx 64 -o "$T/tiny64.gguf" >/dev/null 2>&1 || fail "gen-model tiny64"
"$Q" gen-model --preset tiny --n-ctx 8192 -o "$T/tiny8k.gguf" >/dev/null 2>&1 || fail "gen-model tiny8k"
expect "run: -n past the default context is cut, not unbounded" 0 "-n 100000 cut to [0-9]+: the context holds 4096 tokens" -- \
    "$Q" run -m "$T/tiny64.gguf" -p "abc" -n 100000 --json --threads 1 --ignore-eos
expect "run: default context grows to hold prompt + -n and says so" 0 "context 4096 -> 4101 tokens" -- \
    "$Q" run -m "$T/tiny8k.gguf" --prompt-tokens 4100 -n 1 --json --threads 1
expect "run: warning past the trained context length" 0 "passes the 64 the model was trained on" -- \
    "$Q" run -m "$T/tiny64.gguf" -p "abc" -n 80 --ctx 128 --ignore-eos --json --threads 1

# ---- seeds: random unless given, printed ----
s1=$($TO "$Q" run -m "$D" -p "In the beginning" -n 12 --temp 0.8 --json 2>/dev/null)
s2=$($TO "$Q" run -m "$D" -p "In the beginning" -n 12 --temp 0.8 --json 2>/dev/null)
seed1=$(echo "$s1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["seed"])' 2>/dev/null)
seed2=$(echo "$s2" | python3 -c 'import json,sys; print(json.load(sys.stdin)["seed"])' 2>/dev/null)
check "run: --json prints the seed" $([ -n "$seed1" ]; echo $?) "no seed in: $(echo "$s1" | cut -c1-120)"
check "run: no --seed gives a fresh seed per run" $([ -n "$seed1" ] && [ "$seed1" != "$seed2" ]; echo $?) "seeds '$seed1' '$seed2'"
r1=$($TO "$Q" run -m "$D" -p "In the beginning" -n 12 --temp 0.8 --seed "${seed1:-1}" --json 2>/dev/null | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])' 2>/dev/null)
t1=$(echo "$s1" | python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens"])' 2>/dev/null)
check "run: the printed seed repeats the run" $([ -n "$t1" ] && [ "$r1" = "$t1" ]; echo $?) "tokens '$t1' vs '$r1'"
expect "run: the summary names the seed" 0 "seed=7 " -- "$Q" run -m "$D" -p "In the beginning" -n 2 --temp 0.8 --seed 7
texts=$(for i in 1 2 3 4; do $TO "$Q" run -m "$D" -p "And it came to pass" -n 16 --temp 1.0 --ignore-eos 2>/dev/null; done | sort -u | wc -l)
check "run: --temp 1.0 without --seed varies between runs" $([ "$texts" -gt 1 ]; echo $?) "$texts distinct texts of 4"

# ---- run: --echo, and the summary after the text's final newline under 2>&1 ----
out=$($TO "$Q" run -m "$D" -p "In the beginning" -n 6 --echo 2>/dev/null)
check "run: --echo prints the prompt first" $(case "$out" in "In the beginning"*) echo 0;; *) echo 1;; esac) "got: $(echo "$out" | head -c 100)"
out=$($TO "$Q" run -m "$D" -p "In the beginning" -n 6 2>/dev/null)
check "run: no echo by default" $(case "$out" in "In the beginning"*) echo 1;; *) echo 0;; esac) "got: $(echo "$out" | head -c 100)"
out=$($TO "$Q" run -m "$D" -p "In the beginning" -n 6 --ignore-eos 2>&1 | cat)
last=$(printf '%s\n' "$out" | tail -1)
check "run: with 2>&1 the summary is its own last line" $(case "$last" in "qwisp: prompt="*) echo 0;; *) echo 1;; esac) "last line: $last"

# ---- chat: /help and /exit are commands, never messages; the banner names the model ----
out=$(printf '/help\n/exit\nAnd it came to pass\n' | $TO "$Q" chat -m "$D" -i -n 4 2>"$T/chat.err"); rc=$?
check "chat: /help lists the commands" $([ "$rc" -eq 0 ] && echo "$out" | grep -q '^  /exit, /quit'; echo $?) "rc=$rc out=$(echo "$out" | head -2)"
check "chat: /help and /exit are not sent to the model" $([ "$(echo "$out" | grep -vc '^  \|^commands\|^Ctrl-C')" -eq 0 ]; echo $?) \
    "model text in: $(echo "$out" | grep -v '^  \|^commands\|^Ctrl-C' | head -2)"
check "chat: the banner names the model" $(grep -q "model qwisp-default (models/default.gguf)" "$T/chat.err"; echo $?) "stderr: $(head -c 200 "$T/chat.err")"
check "chat: the banner says when the context passes the trained length" \
    $(grep -q "the model was trained on 2048 tokens" "$T/chat.err"; echo $?) "stderr: $(tail -c 200 "$T/chat.err")"
out=$(printf '/frobnicate\n' | $TO "$Q" chat -m "$D" -i -n 4 2>/dev/null)
check "chat: an unknown /command is refused, not sent" $(echo "$out" | grep -q "unknown command '/frobnicate'"; echo $?) "out: $out"
out=$(printf 'In the beginning\n' | $TO "$Q" chat -m "$D" -i -n 4 --seed 5 2>/dev/null)
check "chat: a plain line still gets a reply" $([ -n "$out" ]; echo $?) "empty reply"
# On a terminal (tmux): editing keys and history work, Ctrl-C at the prompt does not quit.
if command -v tmux >/dev/null 2>&1; then
    S=qwisp-cli-$$
    TM=(tmux -L "qwisp-test-$$") # a private tmux server: no clash with a user's sessions
    # wait_pane REGEX COUNT: up to 15 s for COUNT lines matching REGEX in the pane
    wait_pane() { for _ in $(seq 150); do [ "$("${TM[@]}" capture-pane -p -t "$S" | grep -c -- "$1")" -ge "$2" ] && return; sleep 0.1; done; }
    if ! TERM=${TERM:-xterm} "${TM[@]}" new-session -d -s "$S" -x 160 -y 50 "\"$Q\" chat -m \"$D\" -n 4 2>&1; echo CHAT-EXIT=\$?; sleep 20"; then
        echo "SKIP: chat (tty): tmux could not start a session here"
    else
        wait_pane '^> ' 1
        "${TM[@]}" send-keys -t "$S" "/hlp" Left Left "e" Enter; wait_pane '^  /reset' 1
        "${TM[@]}" send-keys -t "$S" Up Enter; wait_pane '^  /reset' 2
        "${TM[@]}" send-keys -t "$S" C-c; wait_pane 'or Ctrl-D to quit' 1
        "${TM[@]}" send-keys -t "$S" "/exit" Enter; wait_pane 'CHAT-EXIT' 1
        pane=$("${TM[@]}" capture-pane -p -t "$S")
        "${TM[@]}" kill-server 2>/dev/null
        check "chat (tty): the banner names the model" $(echo "$pane" | grep -q "model qwisp-default"; echo $?) "pane: $(echo "$pane" | head -2)"
        check "chat (tty): cursor keys edit the line (/hlp <- <- e = /help)" \
            $(echo "$pane" | grep -q '^  /reset' && ! echo "$pane" | grep -q 'unknown command'; echo $?) "pane: $(echo "$pane" | head -4)"
        check "chat (tty): Up recalls the last line" $([ "$(echo "$pane" | grep -c '^  /reset')" -eq 2 ]; echo $?) \
            "/help shown $(echo "$pane" | grep -c '^  /reset') times"
        check "chat (tty): Ctrl-C at the prompt does not quit, /exit does" \
            $(echo "$pane" | grep -q '(/exit or Ctrl-D to quit)' && echo "$pane" | grep -q 'CHAT-EXIT=0'; echo $?) "pane: $(echo "$pane" | tail -4)"
    fi
else
    echo "SKIP: chat (tty): tmux not installed (scripts/setup.sh installs it)"
fi

# ---- tokenize / info take the default model; token text beside ids ----
expect "tokenize: no -m uses the default model" 0 '^\[9707,11,1879\]$' -- "$Q" tokenize -p "Hello, world"
expect "tokenize -v: ids with their text" 0 '^ +1879  " world"$' -- "$Q" tokenize -p "Hello, world" -v
expect "tokenize: -m and --hf-tokenizer together refused" 2 "at most one of -m/--hf-tokenizer" -- \
    "$Q" tokenize -m "$D" --hf-tokenizer x -p hi
expect "info: no FILE uses the default model" 0 'general.name \(str\) = "qwisp-default"' -- "$Q" info --no-tensors
expect "info: -m FILE accepted" 0 'general.name \(str\) = "qwisp-default"' -- "$Q" info -m "$D" --no-tensors
expect "info: -m and FILE together refused" 2 "more than one FILE" -- "$Q" info -m "$D" "$D"
out=$($TO "$Q" logits -m "$D" -p "In the beginning" --top 2 2>/dev/null)
check "logits: input tokens' text in pieces, text beside each top id" \
    $(echo "$out" | python3 -c '
import json, sys
o = json.load(sys.stdin)
assert o["pieces"] == ["In", " the", " beginning"], o["pieces"]
assert all(len(e) == 3 and isinstance(e[2], str) for p in o["positions"] for e in p["top"])
assert o["positions"][0]["top"][0][2] == " the"' >/dev/null 2>&1; echo $?) "out: $(echo "$out" | head -c 200)"

# ---- gen-model reports, --version, bench's roofline wording ----
rm -f "$T/g.gguf"
out=$($TO "$Q" gen-model --preset default --tokenizer bytes -o "$T/g.gguf" 2>&1); rc=$?
check "gen-model: one line on success names the file and size" \
    $([ "$rc" -eq 0 ] && echo "$out" | grep -qE "^qwisp gen-model: wrote $T/g.gguf \([0-9.]+ MB, qwen3moe, q8_0"; echo $?) "rc=$rc out=$out"
err=$($TO "$Q" gen-model --preset default --tokenizer bytes --progress 0.05 -o "$T/g.gguf" 2>&1 >/dev/null)
check "gen-model: progress lines while writing" $(echo "$err" | grep -qE "^qwisp gen-model: [0-9.]+ MB written in"; echo $?) "stderr: $(echo "$err" | head -2)"
expect "gen-model: bad --progress" 2 "--progress x: seconds in" -- "$Q" gen-model --progress x -o "$T/g.gguf"
rm -f "$T/g.gguf"
expect "--version" 0 "^qwisp [0-9]+\.[0-9]+\.[0-9]+ \(git [0-9a-f]+" -- "$Q" --version
"$Q" gen-model --preset tiny -o "$T/tiny.gguf" >/dev/null 2>&1
out=$($TO "$Q" bench -m "$T/tiny.gguf" -p 0 -n 8 -r 1 --bw-mb 32 --threads 1 2>&1)
check "bench: a model inside the cache gets a note on the roofline share" \
    $(echo "$out" | grep -q "^note: the active weights .* fit in the last-level cache"; echo $?) "out: $(echo "$out" | tail -2)"
out=$($TO "$Q" bench -m "$T/tiny.gguf" -p 0 -n 4 -r 1 --bw-mb 32 --threads 1 --json 2>/dev/null | tail -1)
check "bench --json: the roofline uses the best of four bandwidth probes" $(echo "$out" | python3 -c '
import json, sys
j = json.loads(sys.stdin.read()); p = j["mem_read_probes_gb_s"]
ok = set(p) == {"plain", "prefetch", "4-streams", "4-streams+prefetch"} and all(v > 0 for v in p.values())
ok = ok and abs(j["mem_read_gb_s"] - max(p.values())) < 1e-9 and p[j["mem_read_probe"]] == max(p.values())
sys.exit(0 if ok else 1)'; echo $?) "out: $out"
expect "bench --help explains shares over 100 %" 0 "pass 100 % and a note says why" -- "$Q" bench --help
out=$($TO "$Q" bench -m "$T/tiny.gguf" -p 0 -n 6 -r 2 --bw-mb 0 --threads 2 --lanes 1,3,8 --json 2>/dev/null | tail -1)
check "bench --lanes: one aggregate decode test per lane count (the lanes path's batched step)" $(echo "$out" | python3 -c '
import json, sys
j = json.loads(sys.stdin.read()); t = j["tg_lanes"]
ok = [x["lanes"] for x in t] == [1, 3, 8] and all(0 < x["agg_tok_s"]["min"] <= x["agg_tok_s"]["median"] <= x["agg_tok_s"]["max"] for x in t)
sys.exit(0 if ok else 1)'; echo $?) "out: $out"
check "bench --json: each test lists its repetitions' figures in run order, within min..max" $(echo "$out" | python3 -c '
import json, sys
j = json.loads(sys.stdin.read())
ok = all(len(s["samples"]) == 2 and s["min"] == min(s["samples"]) and s["max"] == max(s["samples"])
         for s in [j["tg_tok_s"]] + [x["agg_tok_s"] for x in j["tg_lanes"]])
sys.exit(0 if ok else 1)'; echo $?) "out: $out"
expect "bench --lanes: the table names each test tg<N>@<B>" 0 "^tg6@3 .*aggregate of 3 lanes" -- "$Q" bench -m "$T/tiny.gguf" -p 0 -n 6 -r 1 --bw-mb 0 --lanes 3
expect "bench --lanes 0 refused" 2 "--lanes.*0" -- "$Q" bench -m "$T/tiny.gguf" --lanes 0
expect "bench --lanes with an empty item refused" 2 "--lanes '1,,2'" -- "$Q" bench -m "$T/tiny.gguf" --lanes 1,,2
expect "bench --lanes without decode tokens refused" 2 "--lanes needs decode tokens" -- "$Q" bench -m "$T/tiny.gguf" -n 0 --lanes 2

# ---- config lists QWISP_LOG; help and docs carry no internal history ----
expect "config lists QWISP_LOG" 0 "^QWISP_LOG +warn +default" -- "$Q" config
expect "config: QWISP_LOG from env" 0 "^QWISP_LOG +debug +env" -- env QWISP_LOG=debug "$Q" config
expect "bad QWISP_LOG value exits 2 naming it" 2 "QWISP_LOG='loud': expected one of error\|warn\|info\|debug" -- env QWISP_LOG=loud "$Q" config
hist=""
for c in run logits info tokenize gen-model convert config serve chat footprint simulate ab bench; do
    h=$("$Q" $c --help 2>&1)
    echo "$h" | grep -qiE "issue|#[0-9]+|the seed's" && hist="$hist $c"
done
check "help texts name no issues or internal history" $([ -z "$hist" ]; echo $?) "in:$hist"
docs_hist=$(grep -nE "[Ii]ssue ?#?[0-9]|the issue|[(]#[0-9]+[)]|the seed's" README.md docs/*.md models/README.md 2>/dev/null | head -3)
check "README and docs carry no internal history" $([ -z "$docs_hist" ]; echo $?) "$docs_hist"
help_types=$("$Q" convert --help | sed -n 's/.*--type \([^] ]*\).*/\1/p' | head -1)
readme_types=$(sed -n 's/.*qwisp convert HF_DIR -o OUT.gguf \[--type \([^] ]*\)\].*/\1/p' README.md | head -1)
expand() { echo "$1" | sed 's/q2_K\.\.q6_K/q2_K|q3_K|q4_K|q5_K|q6_K/' | tr '|' '\n' | sort | tr '\n' ' '; }
check "README lists the convert --type values convert --help lists" \
    $([ -n "$help_types" ] && [ "$(expand "$help_types")" = "$(expand "$readme_types")" ]; echo $?) "help '$help_types' README '$readme_types'"

# ---- LICENSE and make install ----
check "LICENSE is the MIT licence" $(grep -q "^MIT License" LICENSE 2>/dev/null && grep -q "Permission is hereby granted, free of charge" LICENSE; echo $?) "no MIT LICENSE file"
check "models/README.md names the licence and the training text's terms" \
    $(grep -q "MIT licence" models/README.md && grep -q "Regents of the University of California" models/README.md; echo $?) "models/README.md"
R="$T/root"
rm -rf "$R"
out=$(timeout 120 make --no-print-directory install BUILD="${QWISP_BUILD:-build}" DESTDIR="$R" PREFIX=/opt/q 2>&1); rc=$?
check "make install honours DESTDIR and PREFIX" $([ "$rc" -eq 0 ] && [ -x "$R/opt/q/bin/qwisp" ] && [ -f "$R/opt/q/share/qwisp/default.gguf" ]; echo $?) "rc=$rc $(echo "$out" | tail -2)"
out=$(cd "$T" && QWISP_MODEL= $TO "$R/opt/q/bin/qwisp" run -p "In the beginning" -n 2 --seed 1 2>&1); rc=$?
check "the installed binary finds its default model from any directory" $([ "$rc" -eq 0 ]; echo $?) "rc=$rc $(echo "$out" | tail -1)"
timeout 60 make --no-print-directory uninstall BUILD="${QWISP_BUILD:-build}" DESTDIR="$R" PREFIX=/opt/q >/dev/null 2>&1
check "make uninstall removes what install put" $([ -z "$(find "$R" -type f 2>/dev/null)" ]; echo $?) "left: $(find "$R" -type f | head -2)"
rm -rf "$R"
