"""prefix_lib.py — the HTTP helpers the prefix-cache tests (t_prefix.sh,
t_prefix_blocks.sh) share: POST a JSON body, read one /metrics value, print a
PASS:/FAIL: line."""
import json, urllib.request
def post(port, path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)
def metric(port, name):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return None
def check(name, ok, detail="", tag=""):
    print(("PASS: " if ok else "FAIL: ") + (tag + ": " if tag else "") + name + ("" if ok else " — " + str(detail)[:300]))
