#!/usr/bin/env python3
"""probe.py — raw-socket cases for t_hardening.sh that curl cannot make:
slow (slowloris) clients, a half-closed client, binary garbage instead of a
request, a stalled body, concurrent uploads past the body budget.  Loopback
only; every wait is bounded.  Prints PASS:/FAIL: lines.

    probe.py CASE PORT [ARGS]   (CASE: slowloris, halfclose, garbage, bodystall, budget)
"""
import http.client
import json
import select
import socket
import sys
import threading
import time

HOST = "127.0.0.1"


def check(name, ok, detail=""):
    print(("PASS: " if ok else "FAIL: ") + name + ("" if ok or not detail else " — " + str(detail)[:300]))
    sys.stdout.flush()


def request(port, method, path, body=None, src="127.0.0.1", timeout=20, headers=None):
    """(status, body bytes), or (0, error text) if the request could not complete."""
    try:
        c = http.client.HTTPConnection(HOST, port, timeout=timeout, source_address=(src, 0))
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data
    except Exception as e:  # noqa: BLE001 — the detail goes into the FAIL line
        return 0, repr(e)


CHAT = json.dumps({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2})


def closed(s):
    """True if the server ended this connection (EOF, reset, or a 408 then EOF)."""
    try:
        r, _, _ = select.select([s], [], [], 0)
        if not r:
            return False
        data = s.recv(4096)
        return data == b"" or data.startswith(b"HTTP/1.1 408")
    except OSError:
        return True


def attackers(port, src, n):
    socks = []
    for _ in range(n):
        try:
            s = socket.socket()
            s.bind((src, 0))
            s.settimeout(2)
            s.connect((HOST, port))
            s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n")
            socks.append(s)
        except OSError:
            pass
    return socks


def slowloris(port, header_timeout):
    stop = threading.Event()
    groups = []

    def drip():
        while not stop.wait(0.5):
            for g in groups:
                for s in g:
                    try:
                        s.send(b"X-Drip: 1\r\n")
                    except OSError:
                        pass

    t0 = time.time()
    groups.append(attackers(port, "127.0.0.2", 40))
    threading.Thread(target=drip, daemon=True).start()
    time.sleep(0.5)
    alive = [s for s in groups[0] if not closed(s)]
    check("slowloris: one address holds at most --max-conns-per-client (8) of 40 connections",
          0 < len(alive) <= 8, f"{len(alive)} alive")
    st, body = request(port, "GET", "/health", timeout=5)
    check("slowloris: /health answers while a client drips headers", st == 200, f"{st} {body}")
    st, body = request(port, "POST", "/v1/chat/completions", CHAT, timeout=10)
    check("slowloris: chat from another address is served", st == 200, f"{st} {body[:200]}")
    # 20 more from three addresses: open connections now exceed --max-conns 16
    # whether or not the first 8 have met their deadline yet, and stay under
    # the accept limit (16 + 16) either way.
    groups.append(attackers(port, "127.0.0.3", 8))
    groups.append(attackers(port, "127.0.0.4", 8))
    groups.append(attackers(port, "127.0.0.5", 4))
    t_last = time.time()
    time.sleep(0.3)
    st, body = request(port, "GET", "/v1/models", timeout=5)
    check("slots full: /v1/models gets 429 too_many_connections", st == 429 and b"too_many_connections" in body, f"{st} {body}")
    st, body = request(port, "GET", "/health", timeout=5)
    check("slots full: /health still answers 200", st == 200, f"{st} {body}")
    # Every dripping connection is ended by the header deadline, dripping or not.
    deadline = t_last + header_timeout + 3
    socks = [s for g in groups for s in g]
    while time.time() < deadline and not all(closed(s) for s in socks):
        time.sleep(0.2)
    left = sum(not closed(s) for s in socks)
    check(f"slowloris: every dripping connection closed by the {header_timeout:g} s header deadline",
          left == 0, f"{left} still open after {time.time() - t0:.1f} s")
    stop.set()
    for s in socks:
        s.close()
    st, body = request(port, "POST", "/v1/chat/completions", CHAT, timeout=10)
    check("slowloris: served normally afterwards", st == 200, f"{st} {body[:200]}")


def read_all(s, limit_s):
    s.settimeout(limit_s)
    out = b""
    t_end = time.time() + limit_s
    try:
        while time.time() < t_end:
            d = s.recv(65536)
            if not d:
                break
            out += d
    except OSError:
        pass
    return out


def halfclose(port):
    for stream in (False, True):
        body = json.dumps({"prompt": "Once", "max_tokens": 8, "temperature": 0, "ignore_eos": True,
                           "stream": stream}).encode()
        s = socket.create_connection((HOST, port), timeout=5)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Connection: close\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        s.shutdown(socket.SHUT_WR)  # half-close: done sending, still reading
        out = read_all(s, 20)
        s.close()
        name = "half-closed client still gets its " + ("stream" if stream else "response")
        ok = out.startswith(b"HTTP/1.1 200") and (b"[DONE]" in out if stream else b'"completion_tokens":8' in out)
        check(name, ok, out[:300])


def garbage(port, header_timeout):
    cases = [("binary garbage line (NUL first)", b"\x00\x01\x02\xff\xfe garbage\r\n\r\n", b"HTTP/1.1 4"),
             ("binary garbage, no line end", b"\x00\x01\x02\xff\xfe\x80\x81", b"HTTP/1.1 4"),
             ("control bytes as the method", b"\x01\x02\x03 /v1/models HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 400")]
    for name, data, want in cases:
        s = socket.create_connection((HOST, port), timeout=5)
        t = time.time()
        s.sendall(data)
        out = read_all(s, header_timeout + 3)
        dt = time.time() - t
        s.close()
        check(f"{name}: an error reply and the connection closed within the header deadline",
              out.startswith(want) and dt < header_timeout + 2.5, f"{dt:.1f} s, {out[:120]!r}")


def bodystall(port, body_timeout):
    s = socket.create_connection((HOST, port), timeout=5)
    t = time.time()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: 1000\r\n\r\n{\"prompt\":")
    out = read_all(s, body_timeout + 3)
    dt = time.time() - t
    s.close()
    check("stalled body: 408 request_timeout within the body deadline",
          out.startswith(b"HTTP/1.1 408") and b"request_timeout" in out and dt < body_timeout + 2.5,
          f"{dt:.1f} s, {out[:200]!r}")


def budget(port, max_body):
    """Four bodies of about max_body, all but their last bytes sent, hold the
    whole budget (4 x max_body) while they stall; a fifth is refused with 429
    server_busy; once they are gone the next is served."""
    n = max_body - 100
    # "user": a field the server deliberately ignores (unknown ones are a 400)
    big = b'{"prompt":"x","max_tokens":1,"user":"' + b"p" * (n - 40) + b'"}'
    # Announcing a size reserves nothing: eight clients that announce max_body
    # and trickle hold only what they sent.
    tricklers = []
    for i in range(8):
        s = socket.create_connection((HOST, port), timeout=5, source_address=(f"127.0.2.{i + 1}", 0))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Connection: close\r\nContent-Length: " + str(n).encode() + b"\r\n\r\n" + b" " * 1000)
        tricklers.append(s)
    time.sleep(0.5)
    st, body = request(port, "POST", "/v1/completions", big, src="127.0.1.9", timeout=10)
    check("body budget: announced sizes reserve nothing (a full body still served)", st == 200, f"{st} {body[:200]}")
    for s in tricklers:
        s.close()
    held = []
    for i in range(4):
        s = socket.create_connection((HOST, port), timeout=5, source_address=(f"127.0.1.{i + 1}", 0))
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Connection: close\r\nContent-Length: " + str(n).encode() + b"\r\n\r\n" + b" " * (n - 10))
        held.append(s)
    time.sleep(1)
    st, body = request(port, "POST", "/v1/completions", big, src="127.0.1.9", timeout=10)
    check("body budget full: the next body gets 429 server_busy", st == 429 and b"server_busy" in body, f"{st} {body[:200]}")
    for s in held:
        s.close()
    time.sleep(0.5)
    st, body = request(port, "POST", "/v1/completions", big, src="127.0.1.9", timeout=10)
    check("body budget released: the same body is served", st == 200, f"{st} {body[:200]}")


if __name__ == "__main__":
    case, port = sys.argv[1], int(sys.argv[2])
    args = [float(a) for a in sys.argv[3:]]
    {"slowloris": lambda: slowloris(port, *args), "halfclose": lambda: halfclose(port),
     "garbage": lambda: garbage(port, *args), "bodystall": lambda: bodystall(port, *args),
     "budget": lambda: budget(port, int(args[0]))}[case]()
