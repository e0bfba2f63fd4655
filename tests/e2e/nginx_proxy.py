"""nginx_proxy.py BUILD_DIR — deltad behind a real nginx (run by test_nginx.sh).

nginx gets its own config in a temporary directory (pid, logs and temp paths inside it), listens
on a free 127.0.0.1 port and proxies to deltad with proxy_buffering left at its default (on):
deltad's X-Accel-Buffering: no must make the stream arrive incrementally anyway. Checks: SSE
events arrive one by one, spread over the stream's life, not in a burst at the end; a client
that disconnects from nginx mid-stream gets its generation cancelled and the slot freed.
"""

import json
import os
import shutil
import socket
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (  # noqa: E402
    Checks, Daemon, eog_bias, post_json, request, run_main, start_nginx, stop_nginx, stream,
    tiny_model)

B = sys.argv[1]
C = Checks("test_nginx")
CHAT = "/v1/chat/completions"
SITE = """
server {
    listen 127.0.0.1:%(port)d;
    location / {
        proxy_pass http://127.0.0.1:UPSTREAM;
    }
}
"""


def check_incremental(port, path, body, last_ok, what):
    """A stream through nginx arrives incrementally: spread over its life, in many reads."""
    t0 = time.time()
    st, hd, ev = stream(port, path, body)
    C.ok(st == 200 and ev and last_ok(ev[-1][1]), "%s stream through nginx completes" % what,
         (st, ev[-2:] if ev else None))
    times = [t for t, p in ev if p != "[DONE]"]
    if len(times) < 2:
        C.ok(False, "%s stream has events" % what, ev)
        return
    span = times[-1] - times[0]
    distinct = len(set(round(t, 4) for t in times))
    # no fixed duration: a faster engine finishes the 1000 tokens sooner; a buffered proxy
    # hands every event over in one read, so first and last arrive together
    C.ok(span > 0, "%s: time between first and last chunk > 0 (%.3f s)" % (what, span))
    C.ok(times[0] - t0 < 0.5 * (times[-1] - t0),
         "%s: first chunk arrives before the stream is half over (%.3f of %.3f s)" %
         (what, times[0] - t0, times[-1] - t0))
    print("nginx %s stream: %d events in %d reads over %.3f s" % (what, len(times), distinct, span))
    C.ok(distinct >= len(times) // 4, "%s: chunks arrive in many reads, not one burst (%d reads, "
         "%d events)" % (what, distinct, len(times)))


def check_streams(port, bias):
    """Chat completions, the Responses API and the Messages API, each streamed through nginx."""
    msgs = [{"role": "user", "content": "stream through nginx"}]
    check_incremental(port, CHAT, {"messages": msgs, "max_tokens": 1000, "logit_bias": bias,
                                   "stream": True}, lambda p: p == "[DONE]", "chat")
    check_incremental(port, "/v1/responses",
                      {"input": "stream through nginx", "max_output_tokens": 1000,
                       "logit_bias": bias, "stream": True, "store": False},
                      lambda p: json.loads(p).get("type") == "response.incomplete", "responses")
    check_incremental(port, "/v1/messages",
                      {"model": "m", "messages": msgs, "max_tokens": 1000, "logit_bias": bias,
                       "stream": True},
                      lambda p: json.loads(p).get("type") == "message_stop", "messages")


def check_disconnect(dport, nport, bias):
    before = cancelled(dport)
    body = json.dumps({"messages": [{"role": "user", "content": "disconnect"}],
                       "max_tokens": 100000, "logit_bias": bias, "stream": True}).encode()
    s = socket.create_connection(("127.0.0.1", nport), timeout=10)
    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (CHAT.encode(), len(body), body))
    got = b""
    while got.count(b"data: ") < 3:  # content is flowing: the slot is certainly taken
        chunk = s.recv(4096)
        if not chunk:
            break
        got += chunk
    _, _, slots = request(dport, "GET", "/slots")
    busy = any(x["state"] != "idle" for x in json.loads(slots))
    s.close()
    t0 = time.time()
    idle = False
    while time.time() - t0 < 10 and not idle:
        _, _, slots = request(dport, "GET", "/slots")
        idle = all(x["state"] == "idle" for x in json.loads(slots))
        time.sleep(0.05)
    C.ok(got.startswith(b"HTTP/1.1 200") and busy, "long stream running through nginx", got[:80])
    C.ok(idle, "client disconnect through nginx frees the slot (%.2f s)" % (time.time() - t0))
    C.ok(cancelled(dport) > before, "the generation was cancelled")


def cancelled(port):
    _, _, body = request(port, "GET", "/metrics")
    for line in body.decode().splitlines():
        if line.startswith("deltad_requests_cancelled_total "):
            return float(line.split()[1])
    return 0


def main():
    d = Daemon(B, tiny_model(B), ["--slots", "2", "--ctx", "2048"],
               name="nginx_deltad").start()
    tmp = tempfile.mkdtemp(prefix="deltad-nginx-")
    os.chmod(tmp, 0o755)
    nginx = None
    try:
        nginx, nport = start_nginx(tmp, SITE.replace("UPSTREAM", str(d.port)))
        bias = eog_bias(nport)
        st, _, r = post_json(nport, CHAT, {"messages": [{"role": "user", "content": "hi"}],
                                          "max_tokens": 4})
        C.ok(st == 200 and r["object"] == "chat.completion", "non-streaming through nginx", r)
        check_streams(nport, bias)
        check_disconnect(d.port, nport, bias)
    finally:
        stop_nginx(nginx)
        C.ok(d.stop() == 0, "clean exit after SIGTERM")
        shutil.rmtree(tmp, ignore_errors=True)
    return C.finish()


if __name__ == "__main__":
    run_main(main, C)
