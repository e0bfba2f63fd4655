"""replicas.py BUILD_DIR — three deltad replicas behind a real nginx running the shipped
config/nginx-deltad.conf (only its ports rewritten; one diagnostic header added), run by
test_replicas.sh.

1. Session affinity: the turns of a conversation that carry the same X-Session-Id land on one
   replica and meet its prompt cache (cached_tokens > 0 from the second turn on).
2. Faults under load: six clients send streaming and non-streaming chat requests without a
   session header; one replica is SIGKILLed, later another is SIGTERMed (it drains). Every
   non-streaming request completes (nginx retries what the dead or draining replica refused);
   every stream completes unless it was on the killed replica when it died; the drained
   replica finishes its streams and exits 0; once it drains, the survivor serves everything.

The model is the tiny qwen3 (attention only), whose prompt cache reuses any prefix; the hybrid
models reuse prefixes at checkpoints, which short test prompts do not reach.
"""

import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (  # noqa: E402
    Checks, Daemon, eog_bias, post_json, request, run_main, sse_parse, start_nginx, stop_nginx)

B = sys.argv[1]
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
C = Checks("test_replicas")
CHAT = "/v1/chat/completions"
def site_conf(replicas):
    """The shipped example with the test's ports, plus X-Upstream (the replica that answered)."""
    with open(os.path.join(ROOT, "config", "nginx-deltad.conf")) as f:
        text = f.read()
    for i, r in enumerate(replicas):
        text = text.replace("127.0.0.1:%d " % (8081 + i), "127.0.0.1:%d " % r.port)
    text = text.replace("listen 127.0.0.1:8080;", "listen 127.0.0.1:%(port)d;")
    text = text.replace("location / {", "location / {\n        add_header X-Upstream $upstream_addr always;")
    for i in range(3):
        if "127.0.0.1:%d " % (8081 + i) in text:
            raise RuntimeError("config/nginx-deltad.conf: replica %d's address not rewritten" % i)
    return text


def upstream_of(headers):
    """The replica port that gave the answer (the last of nginx's tries)."""
    addr = headers.get("x-upstream", "").split(",")[-1].strip()
    return int(addr.rsplit(":", 1)[1]) if ":" in addr else None


def check_sessions(port):
    system = ("You are the assistant of the replica test. Answer every question in one short "
              "sentence, and never repeat the question back to the user.")
    for sid in ("alpha", "bravo", "charlie"):
        ups, cached = [], []
        for turn in range(3):
            body = {"messages": [{"role": "system", "content": system},
                                 {"role": "user", "content": "%s turn %d" % (sid, turn)}],
                    "max_tokens": 4, "temperature": 0}
            st, hd, o = post_json(port, CHAT, body, headers={"X-Session-Id": sid})
            C.ok(st == 200 and o and "usage" in o, "session %s turn %d answered" % (sid, turn),
                 (st, o))
            ups.append(upstream_of(hd))
            cached.append(((o or {}).get("usage", {}).get("prompt_tokens_details") or {})
                          .get("cached_tokens", 0))
        C.ok(len(set(ups)) == 1 and ups[0] is not None,
             "session %s: every turn on one replica" % sid, ups)
        C.ok(cached[1] > 0 and cached[2] > 0,
             "session %s: later turns reuse the replica's prompt cache" % sid, cached)


def stream_cut(port, obj):
    """A streaming request that may be cut: (status, headers, payloads, error or None); the
    headers survive a connection that dies mid-stream, so the test knows which replica it was."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    st, hd, events = None, {}, []
    try:
        c.request("POST", CHAT, body=json.dumps(obj).encode(),
                  headers={"Content-Type": "application/json"})
        r = c.getresponse()
        st, hd = r.status, {k.lower(): v for k, v in r.getheaders()}
        buf = b""
        while True:
            chunk = r.read1(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                block, buf = buf.split(b"\n\n", 1)
                events += sse_parse(block + b"\n\n")
        return st, hd, events, None
    except (OSError, http.client.HTTPException) as ex:
        return st, hd, events, repr(ex)
    finally:
        c.close()


class Traffic:
    """Clients sending alternately streaming and non-streaming requests until stopped."""

    def __init__(self, port, bias, n_clients=6):
        self.port, self.bias = port, bias
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.results = []  # (kind, t_start, t_end, status, complete, upstream, detail)
        self.threads = [threading.Thread(target=self.client, args=(i,)) for i in range(n_clients)]

    def client(self, i):
        n = 0
        while not self.stop.is_set():
            body = {"messages": [{"role": "user", "content": "client %d request %d" % (i, n)}],
                    "max_tokens": 96, "temperature": 0, "logit_bias": self.bias}
            t0 = time.time()
            if (i + n) % 2 == 0:
                body["stream"] = True
                body["max_tokens"] = 1500  # long enough to be running when a replica dies
                st, hd, ev, err = stream_cut(self.port, body)
                done = st == 200 and err is None and bool(ev) and ev[-1] == "[DONE]"
                res = ("stream", t0, time.time(), st, done, upstream_of(hd),
                       err or (ev[-1][:200] if ev else ""))
            else:
                try:
                    st, hd, o = post_json(self.port, CHAT, body, timeout=60)
                    done = st == 200 and bool(o) and o["choices"][0]["finish_reason"] == "length"
                    res = ("plain", t0, time.time(), st, done, upstream_of(hd), str(o)[:200])
                except (OSError, http.client.HTTPException) as ex:
                    res = ("plain", t0, time.time(), None, False, None, repr(ex))
            with self.lock:
                self.results.append(res)
            n += 1

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(120)


def check_faults(port, replicas, bias):
    killed, drained, survivor = replicas
    with Traffic(port, bias) as traffic:
        time.sleep(1.0)
        # kill it while it generates (so the "in flight on the killed replica" case happens)
        for _ in range(200):
            _, _, slots = request(killed.port, "GET", "/slots", timeout=5)
            if any(s.get("is_processing") for s in json.loads(slots)):
                break
            time.sleep(0.01)
        t_kill = time.time()
        killed.proc.kill()
        time.sleep(2.0)
        t_term = time.time()
        drained.proc.send_signal(15)
        time.sleep(3.0)
    try:
        rc = drained.proc.wait(40)
    except subprocess.TimeoutExpired:
        rc = None
    C.ok(rc == 0, "the drained replica finished its streams and exited 0", rc)
    res = traffic.results
    plain = [r for r in res if r[0] == "plain"]
    streams = [r for r in res if r[0] == "stream"]
    C.ok(len(plain) >= 3 and len(streams) >= 3, "traffic ran", (len(plain), len(streams)))
    bad_plain = [r for r in plain if not r[4]]
    C.ok(not bad_plain, "every non-streaming request completed", bad_plain[:3])
    lost = [r for r in streams if not r[4]]
    excused = [r for r in lost if r[5] == killed.port and r[1] <= t_kill <= r[2]]
    C.ok(len(lost) == len(excused),
         "every stream completed unless it was on the killed replica when it died",
         [r for r in lost if r not in excused][:3])
    print("traffic: %d non-streaming, %d streams, %d cut on the killed replica; per replica: %s"
          % (len(plain), len(streams), len(excused),
             {r.name: sum(1 for x in res if x[5] == r.port) for r in replicas}))
    on = {r.port: sum(1 for x in res if x[5] == r.port) for r in replicas}
    C.ok(all(on[r.port] > 0 for r in replicas), "all three replicas got traffic", on)
    late = [r for r in res if r[1] > t_term + 0.5 and r[4]]
    for i in range(4):  # and a few more once the drained replica is gone
        st, hd, o = post_json(port, CHAT, {"messages": [{"role": "user", "content": "late %d" % i}],
                                           "max_tokens": 4, "temperature": 0})
        late.append(("plain", 0, 0, st, st == 200, upstream_of(hd), ""))
    C.ok(all(r[4] and r[5] == survivor.port for r in late),
         "after the drain, the survivor serves every request",
         sorted(set((r[3], r[5]) for r in late)))
    C.ok(survivor.proc.poll() is None, "the survivor is still running")


def main():
    model = B + "/models/tiny-qwen3.gguf"
    replicas = [Daemon(B, model, ["--slots", "4", "--drain-timeout", "30"], name="replica%d" % i)
                for i in range(3)]
    tmp = tempfile.mkdtemp(prefix="deltad-replicas-")
    nginx = None
    try:
        for r in replicas:
            r.start()
        nginx, port = start_nginx(tmp, site_conf(replicas))
        bias = eog_bias(replicas[2].port)
        C.ok(bool(bias), "end-of-generation tokens found for the bias")
        check_sessions(port)
        check_faults(port, replicas, bias)
    finally:
        stop_nginx(nginx)
        for r in replicas:
            r.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return C.finish()


run_main(main, C)
