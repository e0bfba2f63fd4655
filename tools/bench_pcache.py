#!/usr/bin/env python3
"""bench_pcache.py BUILD_DIR MODEL [options] — the prompt cache's benchmarks (issue 36).

Default: time to first token of a chat request with a long shared system prompt and a short
question, by where its prefix comes from:

  cold   a system prompt the daemon has never seen (the whole prompt is prefilled);
  slot   the same system prompt as the request before, a new question (reused in place);
  ram    that system prompt after another one took the only slot (back from the RAM tier);
  disk   a restarted daemon (back from cache_dir), after one short unrelated request;
  user   the question alone, no system prompt: the cost of prefilling only the user message.

One slot, speculation as configured by default, streaming; TTFT is measured by the client from
sending the request to the first content delta. The cases are interleaved: each round starts a
daemon (one cache_dir for all rounds), sends it a short request (the first request of a
process pays for its page faults and threads, whatever its prefix), asks the disk case for the
previous round's system prompt, then cold, slot, cold (another prompt), ram, user, and stops
it. Prints the median
(and the range) of --runs rounds per case, the token counts, the warm / user ratios and the
load average before and after. --no-disk runs without cache_dir (and without the disk case).

--mixed: the aggregate prefill a mixed multi-user run saves. --users users (threads), each a
conversation of --turns turns (its own questions, the model's answers carried into the next
turn) under one of --prompts shared system prompts, over --slots slots; run once with
cache_prompt true and once false (each on a fresh daemon, --runs times, alternating). Reports
from /metrics the prompt tokens computed and served by the cache (by tier), and the aggregate
wall time and TTFT of both.

A benchmark, not a test: run it on an otherwise idle machine, and never next to a full test run.
"""

import argparse
import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from harness import Daemon, request  # noqa: E402

WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing "
         "matches near old harbour walls and bright lanterns").split()


def system_text(n_words, seed):
    return " ".join(WORDS[(i * 7 + seed * 13 + i // 3) % len(WORDS)] for i in range(n_words))


def chat_stream(port, msgs, max_tokens=4, cache=True):
    """(seconds to the first content delta, prompt tokens, cached tokens, answer text)."""
    body = {"messages": msgs, "max_tokens": max_tokens, "temperature": 0, "stream": True,
            "stream_options": {"include_usage": True}, "cache_prompt": cache}
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    t0 = time.time()
    c.request("POST", "/v1/chat/completions", body=json.dumps(body).encode(),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    first, usage, buf, text = None, None, b"", []
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
                delta = ev["choices"][0]["delta"] if ev.get("choices") else {}
                piece = delta.get("content") or delta.get("reasoning_content")
                if piece:
                    text.append(delta.get("content") or "")
                    if first is None:
                        first = time.time() - t0
                if ev.get("usage"):
                    usage = ev["usage"]
    c.close()
    cached = usage["prompt_tokens_details"]["cached_tokens"] if usage else -1
    return first, usage["prompt_tokens"] if usage else -1, cached, "".join(text)


def ttft(port, system, question):
    msgs = ([{"role": "system", "content": system}] if system else []) + [
        {"role": "user", "content": question}]
    t, n, cached, _ = chat_stream(port, msgs)
    return t, n, cached


def metrics(port):
    """The /metrics samples as {name or name{labels}: value}."""
    _, _, body = request(port, "GET", "/metrics")
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def load_avg():
    return "%.2f %.2f %.2f" % os.getloadavg()


# ---- TTFT by tier -------------------------------------------------------------------------

def bench_tiers(a):
    tmp = tempfile.mkdtemp(prefix="deltad-bench-pcache-")
    disk = not a.no_disk
    args = ["--slots", "1", "--ctx", "8192"] + (
        ["--cache_dir", os.path.join(tmp, "cache")] if disk else [])
    cases = ("cold", "slot", "ram", "disk", "user")
    res = {k: [] for k in cases}
    info = {}
    q = ["What is the first word?", "Say something short.", "Name a colour."]
    load0 = load_avg()
    try:
        for i in range(a.runs + (1 if disk else 0)):
            d = Daemon(a.build, a.model, args, name="bench-pcache", log_dir=tmp).start()
            ttft(d.port, None, "Hello.")  # the process's first request (page faults, threads)
            plan = []
            if disk and i > 0:  # the previous round's prompt, from the files its daemon left
                plan.append(("disk", system_text(a.words, 2 * i + 98), "Tell me one word."))
            if i < a.runs:
                sa, sb = system_text(a.words, 2 * i + 100), system_text(a.words, 2 * i + 101)
                plan += [("cold", sa, q[0]), ("slot", sa, q[1]), ("cold", sb, q[0]),
                         ("ram", sa, q[2]), ("user", None, "Name an animal %d." % i)]
            for case, system, question in plan:
                t, n, cached = ttft(d.port, system, question)
                res[case].append(t)
                info[case] = (n, cached)
            d.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("model %s, %d rounds, %d-word system prompt; load average before: %s, after: %s" %
          (os.path.basename(a.model), a.runs, a.words, load0, load_avg()))
    med = {}
    for k in cases:
        if not res[k]:
            continue
        n, cached = info.get(k, (-1, -1))
        med[k] = statistics.median(res[k])
        print("  %-5s TTFT median %8.1f ms  (%7.1f .. %7.1f; prompt %d tokens, cached %d)" %
              (k, 1000 * med[k], 1000 * min(res[k]), 1000 * max(res[k]), n, cached))
    for k in ("slot", "ram", "disk"):
        if k in med and med.get("user"):
            print("  %s / user: %.2f" % (k, med[k] / med["user"]))
    return 0


# ---- the mixed multi-user run -------------------------------------------------------------

QUESTIONS = ["What is the first word?", "Say something short.", "Name a colour.",
             "Count to three.", "Which word comes last?", "Give me a number.",
             "Repeat the third word.", "Is the text long?"]


def user_run(port, system, uid, turns, cache, out):
    msgs = [{"role": "system", "content": system}]
    for t in range(turns):
        msgs.append({"role": "user", "content": "%s (user %d)" % (
            QUESTIONS[(uid + 3 * t) % len(QUESTIONS)], uid)})
        first, n, cached, answer = chat_stream(port, msgs, max_tokens=16, cache=cache)
        out.append((first, n, cached))
        msgs.append({"role": "assistant", "content": answer})


def mixed_once(a, cache, tmp):
    d = Daemon(a.build, a.model, ["--slots", str(a.slots), "--ctx", "8192"],
               name="bench-pcache-mixed", log_dir=tmp).start()
    systems = [system_text(a.words, 200 + k) for k in range(a.prompts)]
    m0 = metrics(d.port)
    out = []
    threads = [threading.Thread(target=user_run, args=(d.port, systems[u % a.prompts], u,
                                                       a.turns, cache, out))
               for u in range(a.users)]
    t0 = time.time()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.time() - t0
    m1 = metrics(d.port)
    d.stop()

    def delta(k):
        return m1.get(k, 0) - m0.get(k, 0)

    tiers = {t: delta('deltad_prompt_cache_hit_tokens_total{tier="%s"}' % t)
             for t in ("slot", "ram", "disk")}
    return {"wall": wall, "n": len(out), "prompt": sum(o[1] for o in out),
            "saved": delta("deltad_prompt_cache_saved_total"),
            "abandoned": delta("deltad_prompt_cache_saves_abandoned_total"),
            "computed": delta("deltad_prompt_tokens_total"),
            "cached": delta("deltad_cached_prompt_tokens_total"), "tiers": tiers,
            "ttft": sorted(o[0] for o in out if o[0] is not None)}


def bench_mixed(a):
    tmp = tempfile.mkdtemp(prefix="deltad-bench-pcache-mixed-")
    load0 = load_avg()
    runs = {True: [], False: []}
    try:
        for _ in range(a.runs):
            for cache in (False, True):
                runs[cache].append(mixed_once(a, cache, tmp))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("model %s: %d users x %d turns, %d shared %d-word system prompts, %d slots, %d runs "
          "per mode; load average before: %s, after: %s" %
          (os.path.basename(a.model), a.users, a.turns, a.prompts, a.words, a.slots, a.runs,
           load0, load_avg()))
    walls = {}
    for cache in (False, True):
        rs = runs[cache]
        r = rs[-1]
        walls[cache] = statistics.median(x["wall"] for x in rs)
        ttfts = sorted(t for x in rs for t in x["ttft"])
        p90 = ttfts[int(0.9 * (len(ttfts) - 1))] if ttfts else float("nan")
        print("  cache_prompt %-5s %3d requests, %6d prompt tokens: %6d computed, %6d from the "
              "cache (slot %d, ram %d, disk %d); states saved %d, given up %d; wall median "
              "%6.1f s; TTFT median %6.0f ms, p90 %6.0f ms" %
              (str(cache).lower(), r["n"], r["prompt"], r["computed"], r["cached"],
               r["tiers"]["slot"], r["tiers"]["ram"], r["tiers"]["disk"], r["saved"],
               r["abandoned"], walls[cache],
               1000 * statistics.median(ttfts) if ttfts else float("nan"), 1000 * p90))
    on, off = runs[True][-1], runs[False][-1]
    if on["prompt"]:
        print("  prefill saved: %d of %d prompt tokens (%.0f%%); aggregate time %.2fx faster" %
              (off["computed"] - on["computed"], on["prompt"],
               100.0 * (off["computed"] - on["computed"]) / on["prompt"],
               walls[False] / walls[True] if walls[True] else float("nan")))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build")
    ap.add_argument("model")
    ap.add_argument("--runs", type=int, default=None, help="rounds (default 5; mixed: 1)")
    ap.add_argument("--words", type=int, default=None,
                    help="system prompt words (default 1400, about 3,500 tokens; mixed: 600)")
    ap.add_argument("--no-disk", action="store_true")
    ap.add_argument("--mixed", action="store_true")
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--slots", type=int, default=4)
    a = ap.parse_args()
    if a.mixed:
        a.words = a.words or 600
        a.runs = a.runs or 1
        return bench_mixed(a)
    a.words = a.words or 1400
    a.runs = a.runs or 5
    return bench_tiers(a)


if __name__ == "__main__":
    sys.exit(main())
