#!/bin/bash
# t_deploy.sh — deploy/ checked with the real tools and run for real:
#   haproxy -c on deploy/haproxy.cfg; systemd-analyze verify on the replica
#   unit (SKIP when either tool is absent); the Kubernetes manifests parsed
#   and their kinds, labels and ports cross-checked;
#   3 replicas (the shipped tiny model, 1 thread each) + HAProxy on free
#   loopback ports, driven by the openai client with one replica SIGKILLed
#   mid-load (tests/deploy/lb_client.mjs).  ~10 s.
set -u
Q=${QWISP_BIN:?QWISP_BIN not set}
T=${QWISP_TEST_TMP:-/tmp}/deploy
mkdir -p "$T"
DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$DIR/../.." && pwd)
source "$DIR/../serve/lib.sh"
SERVE_MODEL=$ROOT/models/default.gguf SERVE_THREADS=1

# --- the systemd unit: verified against the built binary (the unit's path is
# /usr/local/bin/qwisp, absent on a build machine)
if command -v systemd-analyze >/dev/null; then
    sed "s#/usr/local/bin/qwisp#$Q#" "$ROOT/deploy/qwisp@.service" >"$T/qwisp@.service"
    out=$(cd "$T" && systemd-analyze verify "$T/qwisp@8081.service" 2>&1); rc=$?
    [ "$rc" = 0 ] && [ -z "$out" ] && pass "systemd-analyze verify deploy/qwisp@.service: no error, no warning" \
        || fail "systemd-analyze verify deploy/qwisp@.service" "rc=$rc $out"
    # the check bites: a misspelt directive is reported
    mkdir -p "$T/bad"
    sed 's/^Restart=/Restrat=/' "$T/qwisp@.service" >"$T/bad/qwisp@.service"
    out=$(cd "$T/bad" && systemd-analyze verify "$T/bad/qwisp@8081.service" 2>&1)
    grep -q "Restrat" <<<"$out" && pass "systemd-analyze verify reports a misspelt directive (the check is live)" \
        || fail "systemd-analyze flags a misspelt directive" "$out"
else
    echo "SKIP: systemd-analyze is not installed: deploy/qwisp@.service not verified"
fi

# --- the Kubernetes manifests: YAML, the four kinds, selectors and ports agree
python3 - "$ROOT/deploy/k8s/qwisp.yaml" <<'PY'
import sys
try:
    import yaml
except ImportError:
    print("SKIP: PyYAML is not installed for python3: deploy/k8s/qwisp.yaml not checked"); sys.exit(0)
def check(name, ok, detail=""):
    print(("PASS: " if ok else "FAIL: ") + name + ("" if ok else " — " + str(detail)[:300]))
try:
    docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
except yaml.YAMLError as e:
    check("deploy/k8s/qwisp.yaml parses as YAML", False, e); sys.exit(0)
kinds = {d["kind"]: d for d in docs}
check("k8s: Deployment, Service, InferencePool, HTTPRoute", sorted(kinds) == ["Deployment", "HTTPRoute", "InferencePool", "Service"], sorted(kinds))
dep, svc, pool, route = (kinds.get(k, {}) for k in ("Deployment", "Service", "InferencePool", "HTTPRoute"))
labels = dep["spec"]["template"]["metadata"]["labels"]
c = dep["spec"]["template"]["spec"]["containers"][0]
port = c["ports"][0]["containerPort"]
args = c["args"]
check("k8s: the container serves on its declared port on all interfaces", args[0] == "serve" and args[args.index("--port") + 1] == str(port) and args[args.index("--host") + 1] == "0.0.0.0", args)
check("k8s: probes on /health (liveness) and /ready (readiness)", c["livenessProbe"]["httpGet"]["path"] == "/health" and c["readinessProbe"]["httpGet"]["path"] == "/ready")
check("k8s: Deployment, Service and InferencePool select the same pods", dep["spec"]["selector"]["matchLabels"] == labels and svc["spec"]["selector"] == labels and pool["spec"]["selector"]["matchLabels"] == labels)
check("k8s: InferencePool v1 targets the container port, with an endpoint picker", pool["apiVersion"] == "inference.networking.k8s.io/v1" and pool["spec"]["targetPorts"] == [{"number": port}] and pool["spec"]["endpointPickerRef"]["name"])
br = route["spec"]["rules"][0]["backendRefs"][0]
check("k8s: the HTTPRoute sends to the InferencePool", br == {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool["metadata"]["name"]})
PY

# --- HAProxy
if ! command -v haproxy >/dev/null; then
    fail "haproxy is not installed (scripts/setup.sh installs the Debian package)"; exit 0
fi
out=$(haproxy -c -f "$ROOT/deploy/haproxy.cfg" 2>&1) && pass "haproxy -c accepts deploy/haproxy.cfg" || fail "haproxy -c deploy/haproxy.cfg" "$out"
command -v node >/dev/null || { fail "node is not installed"; exit 0; }

ports=(); pids=()
for i in 1 2 3; do
    start_server "$T/r$i.log" QWISP_LOG=warn -- --max-conns-per-client 64 || { fail "replica $i starts" "$(tail -3 "$T/r$i.log")"; exit 0; }
    ports+=("$PORT"); pids+=("$SPID")
done
# free ports for HAProxy's frontend and stats: bind to port 0, read it back, release
read -r LB ST < <(python3 -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1",0)) for x in s]
print(*[x.getsockname()[1] for x in s])')
QWISP_LB_BIND=127.0.0.1:$LB QWISP_LB_STATS=127.0.0.1:$ST QWISP_R1=127.0.0.1:${ports[0]} \
    QWISP_R2=127.0.0.1:${ports[1]} QWISP_R3=127.0.0.1:${ports[2]} \
    haproxy -db -f "$ROOT/deploy/haproxy.cfg" >"$T/haproxy.log" 2>&1 &
HPID=$!; PIDS+=("$HPID")
up=""
for _ in $(seq 1 50); do
    n=$(curl -s "http://127.0.0.1:$ST/stats;csv" | grep -c '^qwisp_replicas,r[0-9],.*,UP,')
    [ "$n" = 3 ] && { up=1; break; }
    sleep 0.2
done
[ -n "$up" ] && pass "HAProxy up with 3 replicas passing /ready checks" || { fail "HAProxy sees 3 replicas UP" "$(tail -5 "$T/haproxy.log")"; exit 0; }

timeout 120 node "$DIR/lb_client.mjs" "$LB" "${pids[1]}" "${ports[1]}" "${ports[0]}" "${ports[2]}" 2>"$T/client.err" \
    | grep -E '^(PASS|FAIL|INFO):' || fail "lb_client.mjs ran" "$(tail -5 "$T/client.err")"
down=""
for _ in $(seq 1 20); do
    curl -s "http://127.0.0.1:$ST/stats;csv" | grep -q '^qwisp_replicas,r2,.*,DOWN' && { down=1; break; }
    sleep 0.2
done
[ -n "$down" ] && pass "HAProxy's health check took the killed replica out (DOWN)" || fail "killed replica marked DOWN"
kill -TERM "$HPID" 2>/dev/null
exit 0
