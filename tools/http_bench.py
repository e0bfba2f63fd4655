#!/usr/bin/env python3
"""http_bench.py — decode throughput through the HTTP API (a benchmark, never a test).

For each concurrency level, N clients each stream one chat completion at the same time
(ignore_eos-like: a large max_tokens on a model that rarely stops), and the script reports
per-stream decode tokens/s (tokens after the first / time after the first), time to first
token, and the aggregate tokens/s over the wall time. Compare the single-stream figure with
`deltad bench` on the same model to see the HTTP overhead. It also reads the daemon's
deltad_thread_cpu_seconds_total before and after each level and prints the CPU time of the
HTTP threads (libmicrohttpd's workers and the SSE job timer: parsing, templating,
tokenizing, SSE framing and writes) as a share of the engine's (the scheduler thread plus the
forward-pass workers).

    tools/http_bench.py --url http://127.0.0.1:8080 --streams 1,4,8 --max-tokens 64 --reps 3

Only stdlib; loopback only; bounded in count and time.
"""
import argparse
import http.client
import json
import statistics
import threading
import time
import urllib.parse


def one_stream(url, body, out):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=300)
    t0 = time.monotonic()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    resp = conn.getresponse()
    first = last = None
    usage = None
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        if ev.get("usage"):
            usage = ev["usage"]
        if ev.get("choices") and ev["choices"][0]["delta"].get("content"):
            now = time.monotonic()
            first = first or now
            last = now
    conn.close()
    out.append({"t0": t0, "first": first, "last": last,
                "tokens": usage["completion_tokens"] if usage else 0})


def level(url, n, body):
    results, threads = [], []
    t0 = time.monotonic()
    for _ in range(n):
        th = threading.Thread(target=one_stream, args=(url, body, results))
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    wall = time.monotonic() - t0
    per = [(r["tokens"] - 1) / (r["last"] - r["first"]) for r in results
           if r["first"] and r["last"] > r["first"]]
    ttft = [r["first"] - r["t0"] for r in results if r["first"]]
    total = sum(r["tokens"] for r in results)
    return statistics.median(per) if per else 0, statistics.median(ttft) if ttft else 0, total / wall


def thread_cpu(url):
    """deltad_thread_cpu_seconds_total by group, from /metrics ({} when absent)."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request("GET", "/metrics")
    text = conn.getresponse().read().decode()
    conn.close()
    out = {}
    for line in text.splitlines():
        if line.startswith("deltad_thread_cpu_seconds_total{group="):
            g = line.split('"')[1]
            out[g] = float(line.rsplit(" ", 1)[1])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:8080")
    ap.add_argument("--streams", default="1,4,8")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--prompt", default="Write a long story about a lighthouse keeper.")
    ap.add_argument("--speculative", default=None, help="none|ngram|mtp|ngram,mtp override")
    a = ap.parse_args()
    if urllib.parse.urlparse(a.url).hostname not in ("127.0.0.1", "localhost", "::1"):
        raise SystemExit("http_bench: loopback targets only")
    body = {"messages": [{"role": "user", "content": a.prompt}], "max_tokens": a.max_tokens,
            "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}
    if a.speculative:
        body["speculative"] = a.speculative
    print(f"{'streams':>7} {'tok/s per stream':>17} {'TTFT s':>8} {'aggregate tok/s':>16}"
          f" {'HTTP CPU s':>10} {'engine CPU s':>12} {'HTTP/engine':>11}")
    for n in [int(x) for x in a.streams.split(",")]:
        c0 = thread_cpu(a.url)
        runs = [level(a.url, n, body) for _ in range(a.reps)]
        c1 = thread_cpu(a.url)
        d = {g: c1.get(g, 0) - c0.get(g, 0) for g in c1}
        hcpu, ecpu = d.get("http", 0), d.get("engine", 0) + d.get("compute", 0)
        share = f"{100 * hcpu / ecpu:>10.2f}%" if ecpu > 0 else f"{'-':>11}"
        med = lambda i: statistics.median(r[i] for r in runs)
        print(f"{n:>7} {med(0):>17.2f} {med(1):>8.3f} {med(2):>16.2f} {hcpu:>10.3f} {ecpu:>12.3f}"
              f" {share}")
    print("HTTP/engine = CPU time of the HTTP threads over that of the engine thread and the "
          "compute workers, summed over the level's runs.")


if __name__ == "__main__":
    main()
