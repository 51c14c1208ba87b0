#!/bin/bash
# t_page.sh — the chat page at / in headless Chromium (Debian package
# `chromium`): GET / is the page (HTML, no external asset), and opened as
# /?q=TEXT it streams a reply from /v1/chat/completions — a scripted reply
# (QWISP_TEST_REPLY_FILE, the model still runs) with a thinking block, shown
# apart from the answer — and fills its memory panel from /metrics.  Chromium
# is driven over the DevTools protocol (page_cdp.mjs: it waits for the reply to
# end in real time), then the DOM is checked, and a 1200x800 screenshot by its
# colours (the header, the user's bubble, the plot's footprint line:
# tests/serve/png_colors.py).
# SKIP without chromium.  ~10 s.
set -u
Q=${QWISP_BIN:?QWISP_BIN not set}
T=${QWISP_TEST_TMP:-/tmp}/page
mkdir -p "$T"
DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$DIR/../.." && pwd)
source "$DIR/lib.sh"
SERVE_MODEL=$ROOT/models/default.gguf
CHROME=$(command -v chromium || command -v chromium-browser || true)

printf '<think>\nI ponder the river.\n</think>\n\nThe river runs to the sea.' >"$T/reply.txt"
start_server "$T/serve.log" QWISP_LOG=warn QWISP_TEST_REPLY_FILE="$T/reply.txt" -- || { fail "page: server starts" "$(tail -3 "$T/serve.log")"; exit 0; }
B=http://127.0.0.1:$PORT
hdr=$(curl -s -D - -o "$T/page.html" "$B/")
grep -qi "^content-type: text/html" <<<"$hdr" && grep -q "<title>qwisp</title>" "$T/page.html" \
    && pass "page: GET / is the chat page (text/html)" || fail "page: GET /" "$hdr"
! grep -Eq '(src|href)="(https?:)?//' "$T/page.html" && ! grep -q "@import" "$T/page.html" \
    && pass "page: no external assets (no remote src/href)" || fail "page: external asset referenced"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$B/nope")" = 404 ] && pass "page: other paths still 404" || fail "page: /nope not 404"

[ -n "$CHROME" ] || { echo "SKIP: page: chromium is not installed (scripts/setup.sh installs it): the page is not run"; exit 0; }
url="$B/?q=Tell%20me%20of%20the%20river"
# driven over the DevTools protocol: wait for the reply's stats line (the stream ended), then DOM + screenshot
timeout 100 node --experimental-websocket "$DIR/page_cdp.mjs" "$CHROME" "$T/profile" "$url" \
    "document.querySelector('.stats')?.textContent" "$T/dom.html" "$T/page.png" >"$T/cdp.out" 2>"$T/chrome.err"
grep -qx ok "$T/cdp.out" && pass "page: the streamed reply ended in the browser (its stats line shown)" \
    || fail "page: the reply ended in the browser" "$(cat "$T/cdp.out") $(tail -c 300 "$T/chrome.err")"
python3 - "$T/dom.html" <<'PY'
import re, sys
dom = open(sys.argv[1]).read()
def check(name, ok, detail=""):
    print(("PASS: " if ok else "FAIL: ") + "page: " + name + ("" if ok else " — " + str(detail)[:300]))
log = re.search(r'<div id="log">(.*?)</div>\s*<form', dom, re.S)
log = log.group(1) if log else ""
check("the user's message is shown", '<div class="msg user">Tell me of the river</div>' in log, log[:300])
check("the thinking is streamed apart, in its own block", re.search(r'<details class="think"[^>]*><summary>thinking</summary><div>I ponder the river\.</div></details>', log), log[:400])
check("the answer is streamed (after the thinking, without it)", re.search(r'</details><div>The river runs to the sea\.</div>', log), log[:400])
mem = re.search(r'<table id="mem">(.*?)</table>', dom, re.S)
mem = mem.group(1) if mem else ""
check("the memory panel shows the server's footprint and pool from /metrics",
      re.search(r"<td>footprint</td><td>[0-9.]+ MiB</td>", mem) and re.search(r"<td>pool active</td><td>[0-9.]+ MiB</td>", mem), mem[:300])
PY
if [ -s "$T/page.png" ]; then
    python3 "$DIR/png_colors.py" "$T/page.png" 1d232a dbe9ff 2563eb | python3 -c '
import json, sys
j = json.load(sys.stdin); s = j["share"]
def check(name, ok): print(("PASS: " if ok else "FAIL: ") + "page: " + name + ("" if ok else " — " + json.dumps(j)))
check("screenshot is 1200x800", (j["width"], j["height"]) == (1200, 800))
check("screenshot shows the header bar and the user bubble (their colours cover > 1 % and > 0.3 %)", s["1d232a"] > 0.01 and s["dbe9ff"] > 0.003)
check("screenshot shows the memory plot (its footprint line is drawn)", s["2563eb"] > 0)'
else fail "page: chromium wrote a screenshot" "$(tail -3 "$T/chrome.err")"; fi
exit 0
