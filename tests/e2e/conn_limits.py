"""conn_limits.py BUILD_DIR — connection hardening (run by test_conn_limits.sh): stalled clients
cannot keep others out.

The daemon runs with max_conns 16 and receive_timeout 3. Then:
1. 2 x max_conns clients each send a request line, headers and one byte of a 1000-byte body,
   and stall; a normal request still gets its answer within 2 s (the cap closes the stalled
   connection that waited longest to admit it).
2. Every stalled connection is closed by the daemon within receive_timeout (+ slack), and the
   daemon's log has at most one line per stalled client and no warning or error about them.
3. Slow-header clients (half a request line, then silence) are closed the same way.
4. A request whose body trickles in slower than receive_timeout allows is cut; one that
   arrives complete in time is answered; keep-alive idling is not counted against a request.
"""

import os
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Daemon, request, run_main, tiny_model  # noqa: E402

B = sys.argv[1]
C = Checks("test_conn_limits")
MAX_CONNS, RECV_TIMEOUT = 16, 3
STALL = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
         b"Content-Length: 1000\r\n\r\n{")
CHAT = (b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}')


def stalled(port, data):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(data)
    return s


def closed_by_peer(s, wait):
    """True when the daemon closes s within `wait` seconds."""
    s.settimeout(wait)
    try:
        while True:
            d = s.recv(4096)
            if not d:
                return True
    except ConnectionResetError:
        return True
    except socket.timeout:
        return False


def timed_chat(port):
    t0 = time.time()
    st, _, body = request(port, "POST", "/v1/chat/completions", CHAT,
                          {"Content-Type": "application/json"}, timeout=30)
    return st, time.time() - t0, body


def check_flood(d):
    socks = [stalled(d.port, STALL) for _ in range(2 * MAX_CONNS)]
    time.sleep(0.3)
    st, secs, body = timed_chat(d.port)
    C.ok(st == 200 and secs < 2.0, "a normal request is answered within 2 s behind %d stalled "
         "connections" % len(socks), (st, round(secs, 2), body[:200]))
    t0 = time.time()
    shut = sum(closed_by_peer(s, max(0.1, RECV_TIMEOUT + 2 - (time.time() - t0))) for s in socks)
    C.ok(shut == len(socks), "every stalled connection is closed within receive_timeout",
         "%d of %d" % (shut, len(socks)))
    for s in socks:
        s.close()
    return len(socks)


def check_slow_header(d):
    s = stalled(d.port, b"GET /health HT")
    t0 = time.time()
    C.ok(closed_by_peer(s, RECV_TIMEOUT + 20), "a slow-header client is closed")
    s.close()
    return time.time() - t0


def check_trickle(d):
    # the body arrives a byte per 0.5 s: cut at the deadline, not served
    body = CHAT
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
              b"\r\nContent-Length: %d\r\n\r\n" % len(body))
    t0, cut = time.time(), False
    for i in range(len(body)):
        try:
            s.sendall(body[i:i + 1])
        except OSError:
            cut = True
            break
        time.sleep(0.5)
        if time.time() - t0 > RECV_TIMEOUT + 3:
            break
    if not cut:
        cut = closed_by_peer(s, 3)
    C.ok(cut and time.time() - t0 < RECV_TIMEOUT + 4, "a body trickling past receive_timeout is "
         "cut", round(time.time() - t0, 1))
    s.close()
    # keep-alive: a first request, an idle gap longer than receive_timeout, a second request
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    req = (b"POST /v1/chat/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(body)) + body
    answers = []
    for gap in (0, RECV_TIMEOUT + 1):
        time.sleep(gap)
        s.sendall(req)
        data = b""
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        answers.append(data.split(b"\r\n", 1)[0])
    C.ok(answers == [b"HTTP/1.1 200 OK"] * 2, "a kept-alive connection idle for longer than "
         "receive_timeout still gets its next request answered", answers)
    s.close()


def main():
    d = Daemon(B, tiny_model(B), ["--max-conns", str(MAX_CONNS), "--receive-timeout",
                                  str(RECV_TIMEOUT), "--idle-timeout", "30", "--slots", "2", "--ctx", "1024"],
               name="conn_limits").start()
    try:
        n_stalled = check_flood(d)
        check_slow_header(d)
        n_stalled += 1
        check_trickle(d)
        st, _, _ = request(d.port, "GET", "/health")
        C.ok(st == 200, "the daemon still answers /health")
    finally:
        rc = d.stop()
    C.ok(rc == 0, "the daemon exits 0 on SIGTERM", rc)
    log = d.log_text().splitlines()
    # start-up notes (the configuration dump, e.g. about the test harness's environment) aside
    bad = [l for l in log if (" warn " in l or " error " in l or "error" in l.lower()) and
           " cfg_dump: " not in l]
    C.ok(not bad, "no warning or error in the daemon's log about the clients", bad[:5])
    stall_lines = [l for l in log if "/v1/chat/completions 499" in l or "libmicrohttpd" in l]
    C.ok(len(stall_lines) <= n_stalled + 1, "at most one log line per stalled client",
         "%d lines for %d clients: %s" % (len(stall_lines), n_stalled, stall_lines[:4]))
    return C.finish()


run_main(main, C)
