#!/usr/bin/env python3
"""bench_pcache.py BUILD_DIR MODEL [RUNS] [SYSTEM_WORDS] — time to first token of a chat request
with a long shared system prompt and a short question (issue 36), by where its prefix comes
from:

  cold   a system prompt the daemon has never seen (the whole prompt is prefilled);
  slot   the same system prompt as the request before, a new question (reused in place);
  ram    that system prompt after another one took the only slot (back from the RAM tier);
  disk   the first request of a restarted daemon (back from cache_dir);
  user   the question alone, no system prompt: the cost of prefilling only the user message.

One slot, speculation as configured by default, streaming; TTFT is measured by the client from
sending the request to the first content delta. Prints the median of RUNS runs per case and
the prompt and cached token counts. A benchmark, not a test: run it on an otherwise idle
machine. NO_DISK=1 runs without cache_dir (what writing the files costs the other cases).
"""

import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from harness import Daemon, post_json  # noqa: E402

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing "
         "matches near old harbour walls and bright lanterns").split()


def system_text(n_words, seed):
    return " ".join(WORDS[(i * 7 + seed * 13 + i // 3) % len(WORDS)] for i in range(n_words))


def ttft(port, system, question):
    """(seconds to the first content delta, prompt tokens, cached tokens)."""
    msgs = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": question}]
    body = {"messages": msgs, "max_tokens": 4, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first, usage, buf = None, None, b""
    while True:
        chunk = r.read1(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            for line in block.split(b"\n"):
                if not line.startswith(b"data:") or line.strip() == b"data: [DONE]":
                    continue
                ev = json.loads(line[5:])
                if first is None and ev.get("choices") and (
                        ev["choices"][0]["delta"].get("content") or
                        ev["choices"][0]["delta"].get("reasoning_content")):
                    first = time.time() - t0
                if ev.get("usage"):
                    usage = ev["usage"]
    c.close()
    cached = usage["prompt_tokens_details"]["cached_tokens"] if usage else -1
    return first, usage["prompt_tokens"] if usage else -1, cached


def main():
    build, model = sys.argv[1], sys.argv[2]
    runs = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    words = int(sys.argv[4]) if len(sys.argv) > 4 else 1400
    tmp = tempfile.mkdtemp(prefix="deltad-bench-pcache-")
    disk = os.environ.get("NO_DISK") != "1"  # NO_DISK=1: no cache_dir (and no disk case)
    args = ["--slots", "1", "--ctx", "8192"] + (
        ["--cache_dir", os.path.join(tmp, "cache")] if disk else [])
    res = {k: [] for k in ("cold", "slot", "ram", "disk", "user")}
    info = {}
    try:
        d = Daemon(build, model, args, name="bench-pcache", log_dir=tmp).start()
        for i in range(runs):
            sa, sb = system_text(words, 2 * i + 100), system_text(words, 2 * i + 101)
            q = ["What is the first word?", "Say something short.", "Name a colour."]
            for case, system, question in (("cold", sa, q[0]), ("slot", sa, q[1]),
                                           ("cold", sb, q[0]), ("ram", sa, q[2]),
                                           ("user", None, "Name an animal %d." % i)):
                t, n, cached = ttft(d.port, system, question)
                res[case].append(t)
                info[case] = (n, cached)
        d.stop()
        for i in range(runs if disk else 0):  # disk: stop (checkpoints written), restart, ask
            sa = system_text(words, 2 * i + 100)
            d = Daemon(build, model, args, name="bench-pcache-disk", log_dir=tmp).start()
            t, n, cached = ttft(d.port, sa, "Tell me one word.")
            res["disk"].append(t)
            info["disk"] = (n, cached)
            d.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("model %s, %d runs, medians:" % (os.path.basename(model), runs))
    for k in ("cold", "slot", "ram", "disk", "user"):
        if not res[k]:
            continue
        n, cached = info.get(k, (-1, -1))
        print("  %-5s TTFT %8.1f ms   (prompt %d tokens, cached %d)" %
              (k, 1000 * statistics.median(res[k]), n, cached))
    return 0


if __name__ == "__main__":
    sys.exit(main())
