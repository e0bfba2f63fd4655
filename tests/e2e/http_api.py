"""http_api.py BUILD_DIR — the HTTP API of `deltad serve` end to end (issue 4), run by
test_http_api.sh. Every endpoint and error: health, models, 404/405/413/401, the 400 cases of
docs/openai-api.md 7.3 and numeric edges, context overflow (stream and not), tokenize round trip,
metrics series, slots, CORS; generation: response shapes, usage invariants, SSE framing, stop
strings, max_tokens -> length, logprobs shapes, n=2, seeded determinism alone and under load,
8 parallel streams equal to their solo runs, cancel mid-stream (and a vanished non-streaming
client) frees the slot, SIGTERM drains (503 meanwhile, [DONE] for the stream), queue full ->
429/503 with Retry-After, a slowloris client does not block others and is cut when idle.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (  # noqa: E402
    Checks, Daemon, eog_bias, post_json, request, run_main, stream, tiny_model)

B = sys.argv[1]
MODEL = tiny_model(B)
C = Checks("test_http_api")
CHAT, COMPL = "/v1/chat/completions", "/v1/completions"
USER = [{"role": "user", "content": "Tell me a story."}]


def err_of(body):
    return body.get("error", {}) if isinstance(body, dict) else {}


def expect_error(port, path, body, status, etype=None, param=None, what="", headers=None):
    """A request must fail with this status, an OpenAI error object, type and param."""
    if isinstance(body, (bytes, str)):
        st, hd, raw = request(port, "POST", path, body, {"Content-Type": "application/json"})
        try:
            obj = json.loads(raw)
        except ValueError:
            obj = None
    else:
        st, hd, obj = post_json(port, path, body, headers)
    e = err_of(obj)
    good = st == status and isinstance(e.get("message"), str) and "type" in e
    good = good and (etype is None or e.get("type") == etype)
    good = good and (param is None or e.get("param") == param)
    good = good and isinstance(e.get("code"), (str, type(None)))  # issue 32: never a number
    C.ok(good, "%s -> %d %s %s" % (what or json.dumps(body)[:80], status, etype, param),
         "got %d %s" % (st, json.dumps(obj)[:300]))
    return st, hd, obj



# ---- operational endpoints ---------------------------------------------------------------

def check_health_models(d):
    for path in ("/health", "/v1/health"):
        st, _, body = request(d.port, "GET", path)
        C.ok(st == 200 and json.loads(body) == {"status": "ok"}, "GET %s" % path, body)
    for path in ("/v1/models", "/models"):
        st, _, body = request(d.port, "GET", path)
        m = json.loads(body)
        C.ok(st == 200 and m.get("object") == "list" and len(m.get("data", [])) == 1,
             "GET %s list" % path, body)
        e = m["data"][0]
        C.ok(e.get("id") == "tiny-qwen35" and e.get("object") == "model" and
             isinstance(e.get("created"), int) and e.get("owned_by") == "deltad",
             "model object fields", e)
    st, _, body = request(d.port, "GET", "/v1/models/tiny-qwen35")
    C.ok(st == 200 and json.loads(body).get("id") == "tiny-qwen35", "GET /v1/models/{id}", body)
    st, _, body = request(d.port, "GET", "/v1/models/nope")
    C.ok(st == 404 and err_of(json.loads(body)).get("type") == "not_found_error",
         "unknown model id -> 404", body)


def check_routes(d):
    st, _, body = request(d.port, "GET", "/v2/nothing")
    C.ok(st == 404 and err_of(json.loads(body)).get("type") == "not_found_error", "404", body)
    st, hd, body = request(d.port, "GET", CHAT)
    C.ok(st == 405 and "POST" in hd.get("allow", ""), "GET chat -> 405 with Allow", (st, hd))
    st, hd, _ = request(d.port, "POST", "/health", "{}")
    C.ok(st == 405 and "GET" in hd.get("allow", ""), "POST /health -> 405 with Allow", (st, hd))
    st, hd, _ = request(d.port, "GET", "/health")
    C.ok(hd.get("x-request-id", "").startswith("req-"), "X-Request-Id header", hd)


def check_limits(d, max_body):
    big = b'{"messages":[{"role":"user","content":"' + b"a" * max_body + b'"}]}'
    st, _, body = request(d.port, "POST", CHAT, big, {"Content-Type": "application/json"})
    C.ok(st == 413 and err_of(json.loads(body)).get("type") == "invalid_request_error",
         "413 over max_body (Content-Length)", (st, body[:200]))
    # exactly at the cap is not 413 (it is invalid JSON here: 400)
    st, _, _ = request(d.port, "POST", CHAT, b"x" * max_body, {"Content-Type": "application/json"})
    C.ok(st == 400, "a body of exactly max_body is read", st)
    # chunked, no length: 413 or the connection is cut, never a 2xx / 5xx
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
              b"Content-Type: application/json\r\n\r\n")
    status = None
    try:
        chunk = b"a" * 4096
        for _ in range(max_body // 4096 + 4):
            s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        s.sendall(b"0\r\n\r\n")
        status = s.recv(64)
    except OSError:
        status = b"cut"
    s.close()
    C.ok(status == b"cut" or status.startswith(b"HTTP/1.1 413"), "chunked body over the cap",
         status)
    deep = "[" * 200 + "]" * 200
    expect_error(d.port, CHAT, '{"messages":%s}' % deep, 400, "invalid_request_error",
                 what="JSON nesting deeper than the limit")


# ---- validation (docs 7.3) ----------------------------------------------------------------

def check_validation(d):
    p = d.port
    cases = [
        ({}, "messages"), ({"messages": None}, "messages"), ({"messages": "hi"}, "messages"),
        ({"messages": []}, "messages"), ({"messages": [1]}, "messages[0]"),
        ({"messages": [{}]}, "messages[0].role"),
        ({"messages": [{"role": 1, "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user", "content": 1}]}, "messages[0].content"),
        ({"messages": [{"role": "system", "content": "x"}, {}]}, "messages[1].role"),
        ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                       {"role": "assistant", "content": "c"}]}, "messages[2].role"),
        ({"messages": [{"content": "no role"}]}, "messages[0].role"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"messages": [{"role": "user"}]}, "messages[0].content"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
         "messages[0].content"),
        ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].tool_call_id"),
        ({"messages": USER, "max_tokens": 0}, "max_tokens"),
        ({"messages": USER, "max_tokens": -5}, "max_tokens"),
        ({"messages": USER, "max_tokens": 1.5}, "max_tokens"),
        ({"messages": USER, "max_tokens": "10"}, "max_tokens"),
        ({"messages": USER, "max_completion_tokens": 0}, "max_completion_tokens"),
        ({"messages": USER, "n": 0}, "n"), ({"messages": USER, "n": 99}, "n"),
        ({"messages": USER, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"messages": USER, "top_logprobs": 2}, "top_logprobs"),
        ({"messages": USER, "temperature": -1}, "temperature"),
        ({"messages": USER, "temperature": 2.5}, "temperature"),
        ({"messages": USER, "temperature": "hot"}, "temperature"),
        ({"messages": USER, "top_p": 1.5}, "top_p"), ({"messages": USER, "top_p": -0.1}, "top_p"),
        ({"messages": USER, "min_p": 2}, "min_p"), ({"messages": USER, "top_k": -1}, "top_k"),
        ({"messages": USER, "presence_penalty": -3}, "presence_penalty"),
        ({"messages": USER, "frequency_penalty": 2.5}, "frequency_penalty"),
        ({"messages": USER, "repeat_penalty": 0}, "repeat_penalty"),
        ({"messages": USER, "logit_bias": {"999999": 1}}, "logit_bias"),
        ({"messages": USER, "logit_bias": {"5": 101}}, "logit_bias"),
        ({"messages": USER, "logit_bias": {"abc": 1}}, "logit_bias"),
        ({"messages": USER, "logit_bias": [1, 2]}, "logit_bias"),
        ({"messages": USER, "stop": ["s%d" % i for i in range(17)]}, "stop"),
        ({"messages": USER, "stop": ""}, "stop"), ({"messages": USER, "stop": 5}, "stop"),
        ({"messages": USER, "stop": ["x" * 300]}, "stop"),
        ({"messages": USER, "stream": "yes"}, "stream"),
        ({"messages": USER, "stream_options": 3}, "stream_options"),
        ({"messages": USER, "seed": 1.5}, "seed"), ({"messages": USER, "model": 7}, "model"),
        ({"messages": USER, "response_format": {"type": "sound"}}, "response_format.type"),
        ({"messages": USER, "tools": [{"type": "function", "function": {"name": ""}}]}, "tools"),
        ({"messages": USER, "tool_choice": "sometimes"}, "tool_choice"),
        ({"messages": USER, "chat_template_kwargs": "x"}, "chat_template_kwargs"),
    ]
    for body, param in cases:
        expect_error(p, CHAT, body, 400, "invalid_request_error", param)
    raw = [(b"", "empty body"), (b"{", "truncated JSON"), (b'{"messages": []} x', "trailing"),
           (b"[1,2]", "not an object"), (b'{"messages":[{"role":"user","content":"\xff"}]}',
                                         "invalid UTF-8"),
           (b'{"messages":[{"role":"user","content":"a\x00b"}]}', "NUL byte"),
           (b'{"messages":' + USER_RAW + b', "temperature": 1e999}', "temperature inf")]
    for body, what in raw:
        expect_error(p, CHAT, body, 400, "invalid_request_error", what=what)
    ccases = [({}, "prompt"), ({"prompt": []}, "prompt"), ({"prompt": 5}, "prompt"),
              ({"prompt": [999999]}, "prompt"), ({"prompt": [1.5]}, "prompt"),
              ({"prompt": [-1]}, "prompt"), ({"prompt": [[1, 2], [70000]]}, "prompt"),
              ({"prompt": ["a", 5]}, "prompt"), ({"prompt": "x", "best_of": 2}, "best_of"),
              ({"prompt": "x", "logprobs": 6}, "logprobs"), ({"prompt": "x", "echo": 1}, "echo"),
              ({"prompt": "x", "suffix": "y"}, "suffix"), ({"prompt": ""}, "prompt")]
    for body, param in ccases:
        expect_error(p, COMPL, body, 400, "invalid_request_error", param)
    # huge max_tokens is clamped to the context, not rejected; unknown fields are ignored
    st, _, r = post_json(p, CHAT, {"messages": USER, "max_tokens": 10 ** 12, "max_completion_tokens": 3,
                                   "store": True, "metadata": {"a": 1}, "user": "u", "frobnicate": 1})
    C.ok(st == 200 and r["usage"]["completion_tokens"] <= 3, "huge max_tokens clamped; smaller "
         "of max_tokens / max_completion_tokens wins; unknown fields ignored", r)
    st, _, r = post_json(p, COMPL, {"prompt": "x", "max_tokens": 10 ** 15})
    C.ok(st == 200, "completions max_tokens 1e15 clamped", r)


USER_RAW = json.dumps(USER).encode()


def check_context_overflow(d, n_ctx):
    long_text = " ".join("w%d" % i for i in range(n_ctx * 2))
    for streamed in (False, True):
        body = {"messages": [{"role": "user", "content": long_text}], "stream": streamed}
        st, hd, obj = expect_error(d.port, CHAT, body, 400, what="context overflow stream=%s" % streamed)
        e = err_of(obj)
        C.ok(e.get("type") == "exceed_context_size_error" and e.get("n_ctx") == n_ctx and
             e.get("n_prompt_tokens", 0) > n_ctx and "json" in hd.get("content-type", ""),
             "context error carries n_ctx / n_prompt_tokens as JSON (stream=%s)" % streamed, obj)
    expect_error(d.port, COMPL, {"prompt": long_text}, 400, "exceed_context_size_error", "prompt")


def check_tokenize(d):
    text = "Hello world, deltad! <|im_start|>"
    st, _, t = post_json(d.port, "/tokenize", {"content": text})
    C.ok(st == 200 and all(isinstance(i, int) for i in t.get("tokens", [])), "tokenize", t)
    st, _, back = post_json(d.port, "/detokenize", {"tokens": t["tokens"]})
    C.ok(st == 200 and back.get("content") == text, "detokenize round trip", back)
    _, _, sp = post_json(d.port, "/tokenize", {"content": "<|im_start|>", "parse_special": True})
    _, _, nsp = post_json(d.port, "/tokenize", {"content": "<|im_start|>", "parse_special": False})
    C.ok(len(sp["tokens"]) == 1 and len(nsp["tokens"]) > 1, "parse_special", (sp, nsp))
    _, _, wp = post_json(d.port, "/tokenize", {"content": "ab", "with_pieces": True})
    C.ok(all("id" in x and "piece" in x for x in wp["tokens"]), "with_pieces", wp)
    expect_error(d.port, "/tokenize", {"content": 5}, 400, "invalid_request_error", "content")
    expect_error(d.port, "/detokenize", {"tokens": [999999]}, 400, "invalid_request_error", "tokens")


METRIC_SERIES = ["deltad_http_requests_total", "deltad_requests_active", "deltad_queue_depth",
                 "deltad_slots_active", "deltad_prompt_tokens_total",
                 "deltad_generation_tokens_total", "deltad_cached_prompt_tokens_total",
                 "deltad_time_to_first_token_seconds_bucket",
                 "deltad_inter_token_latency_seconds_bucket",
                 "deltad_e2e_request_latency_seconds_count",
                 "deltad_generation_tokens_per_second", "deltad_requests_cancelled_total",
                 "deltad_spec_throttles_total", "deltad_spec_probes_total",
                 "deltad_spec_throttled_rounds_total", "deltad_spec_slots_throttled",
                 'deltad_thread_cpu_seconds_total{group="http"}',
                 'deltad_thread_cpu_seconds_total{group="engine"}']


def metric(port, name):
    _, _, body = request(port, "GET", "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            return float(line.rsplit(" ", 1)[1])
    return None


def check_metrics_slots(d, n_slots):
    st, hd, body = request(d.port, "GET", "/metrics")
    text = body.decode()
    C.ok(st == 200 and hd.get("content-type", "").startswith("text/plain"), "GET /metrics", st)
    for s in METRIC_SERIES:
        C.ok(s in text, "metrics series %s" % s)
    C.ok('endpoint="/v1/chat/completions",status="200"' in text and 'status="400"' in text,
         "requests counted by endpoint and status")
    C.ok(metric(d.port, "deltad_generation_tokens_total") > 0, "generated tokens counted")
    st, _, body = request(d.port, "GET", "/slots")
    slots = json.loads(body)
    C.ok(st == 200 and len(slots) == n_slots and all("id" in s and "state" in s for s in slots),
         "GET /slots", body[:300])
    # issue 33: each slot's draft throttle (mode, throttled, acceptance estimate)
    thr = [s.get("spec_throttle") for s in slots]
    thr += [t.get("ngram") for t in thr if isinstance(t, dict)]
    C.ok(len(thr) == 2 * n_slots and
         all(isinstance(t, dict) and t.get("mode") in ("on", "throttled", "probe") and
             t.get("throttled") == (t.get("mode") == "throttled") and
             0 <= t.get("acceptance", -1) <= 1 for t in thr),
         "GET /slots: spec_throttle (MTP and n-gram) per slot", thr)
    C.ok(metric(d.port, 'deltad_thread_cpu_seconds_total{group="http"}') > 0,
         "HTTP threads' CPU time counted")


# ---- generation ---------------------------------------------------------------------------

def check_chat_shape(d, bias):
    st, _, r = post_json(d.port, CHAT, {"messages": USER, "max_tokens": 6, "logit_bias": bias,
                                        "temperature": 0})
    C.ok(st == 200, "chat 200", r)
    C.ok(r["id"].startswith("chatcmpl-") and r["object"] == "chat.completion" and
         isinstance(r["created"], int) and r["model"] == "tiny-qwen35" and
         r["system_fingerprint"].startswith("b"), "chat envelope", r)
    ch = r["choices"][0]
    C.ok(ch["index"] == 0 and ch["message"]["role"] == "assistant" and
         isinstance(ch["message"]["content"], str) and ch["logprobs"] is None, "chat choice", ch)
    u = r["usage"]
    C.ok(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] and
         isinstance(u["prompt_tokens_details"]["cached_tokens"], int), "usage invariants", u)
    C.ok(ch["finish_reason"] == "length" and u["completion_tokens"] == 6,
         "max_tokens -> finish_reason length", r)
    st, _, r2 = post_json(d.port, CHAT, {"messages": USER, "max_tokens": 6, "logit_bias": bias,
                                         "temperature": 0})
    C.ok(r2["choices"][0]["message"]["content"] == ch["message"]["content"], "greedy repeatable")
    C.ok(r2["usage"]["prompt_tokens_details"]["cached_tokens"] > 0, "repeated prefix is cached",
         r2["usage"])
    st, _, c = post_json(d.port, COMPL, {"prompt": "Once upon", "max_tokens": 4, "echo": True,
                                         "logit_bias": bias})
    C.ok(st == 200 and c["object"] == "text_completion" and c["id"].startswith("cmpl-") and
         c["choices"][0]["text"].startswith("Once upon"), "completions + echo", c)
    st, _, c = post_json(d.port, COMPL, {"prompt": ["one", "two"], "max_tokens": 2, "n": 2})
    C.ok(st == 200 and [x["index"] for x in c["choices"]] == [0, 1, 2, 3],
         "batched prompts x n choices", c)
    return ch["message"]["content"]


def check_stream(d, bias):
    body = {"messages": USER, "max_tokens": 8, "logit_bias": bias, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    st, hd, ev = stream(d.port, CHAT, body)
    C.ok(st == 200 and hd.get("content-type", "").startswith("text/event-stream") and
         hd.get("cache-control") == "no-cache" and hd.get("x-accel-buffering") == "no",
         "SSE headers", hd)
    data = [p for _, p in ev]
    C.ok(data and data[-1] == "[DONE]", "stream ends with [DONE]", data[-3:])
    chunks = [json.loads(p) for p in data[:-1]]
    ids = {c["id"] for c in chunks}
    C.ok(len(ids) == 1 and all(c["object"] == "chat.completion.chunk" for c in chunks),
         "one id, chunk objects", ids)
    first = chunks[0]["choices"][0]
    C.ok(first["delta"] == {"role": "assistant", "content": None}, "role chunk first", first)
    mids = chunks[1:-2]
    C.ok(all("role" not in c["choices"][0]["delta"] and c["choices"][0]["delta"].get("content")
             for c in mids), "content deltas non-empty, no role after the first", mids[:3])
    fin = chunks[-2]["choices"][0]
    C.ok(fin["delta"] == {} and fin["finish_reason"] == "length", "finish chunk", fin)
    us = chunks[-1]
    C.ok(us["choices"] == [] and us["usage"]["completion_tokens"] == 8 and
         us["usage"]["total_tokens"] == us["usage"]["prompt_tokens"] + 8, "usage chunk", us)
    text = "".join(c["choices"][0]["delta"]["content"] for c in mids)
    _, _, r = post_json(d.port, CHAT, dict(body, stream=False))
    C.ok(text == r["choices"][0]["message"]["content"], "stream text == non-stream text",
         (text, r["choices"][0]["message"]["content"]))
    st, _, ev = stream(d.port, CHAT, dict(body, stream_options=None))
    C.ok(all("usage" not in json.loads(p) for _, p in ev[:-1]) and ev[-1][1] == "[DONE]",
         "no usage chunk without include_usage")
    st, _, ev = stream(d.port, COMPL, {"prompt": "abc", "max_tokens": 3, "stream": True})
    objs = [json.loads(p) for _, p in ev[:-1]]
    C.ok(st == 200 and all(o["object"] == "text_completion" for o in objs) and
         objs[-1]["choices"][0]["finish_reason"] in ("stop", "length") and ev[-1][1] == "[DONE]",
         "completions stream", objs[-2:])


def printable_run(text):
    best, cur = "", ""
    for ch in text:
        cur = cur + ch if ch.isascii() and ch.isprintable() else ""
        best = cur if len(cur) > len(best) else best
    return best


def check_stop(d, bias):
    for seed in range(1, 30):
        base = {"messages": [{"role": "user", "content": "stop test %d" % seed}],
                "max_tokens": 40, "logit_bias": bias, "temperature": 0}
        _, _, r = post_json(d.port, CHAT, base)
        full = r["choices"][0]["message"]["content"]
        run = printable_run(full)
        if len(run) >= 2 and full.index(run) >= 3:
            break
    stop = run[:2]
    cut = full[:full.index(stop)]
    _, _, r = post_json(d.port, CHAT, dict(base, stop=[stop, "\u00a7never"]))
    out = r["choices"][0]
    C.ok(out["message"]["content"] == cut and out["finish_reason"] == "stop",
         "stop string ends the text before it", (stop, cut, out))
    st, _, ev = stream(d.port, CHAT, dict(base, stop=stop, stream=True))
    deltas = [json.loads(p)["choices"][0]["delta"].get("content") or "" for _, p in ev[:-1]]
    C.ok("".join(deltas) == cut and all(stop not in x for x in deltas),
         "streamed text stops before the stop string", (stop, deltas))


def check_logprobs(d, bias):
    _, _, r = post_json(d.port, CHAT, {"messages": USER, "max_tokens": 5, "logit_bias": bias,
                                       "temperature": 0, "logprobs": True, "top_logprobs": 3})
    lp = r["choices"][0]["logprobs"]
    content = lp.get("content") if lp else None
    C.ok(isinstance(content, list) and len(content) == 5, "chat logprobs content[]", lp)
    for e in content or []:
        top = e.get("top_logprobs", [])
        good = (isinstance(e.get("token"), str) and e["logprob"] <= 0 and
                all(isinstance(b, int) and 0 <= b < 256 for b in e["bytes"]) and len(top) == 3 and
                all({"token", "logprob", "bytes"} <= set(t) for t in top) and
                abs(top[0]["logprob"] - e["logprob"]) < 1e-4 and
                all(top[i]["logprob"] >= top[i + 1]["logprob"] for i in range(2)))
        C.ok(good, "logprob entry shape (greedy: chosen == best)", e)
    st, _, ev = stream(d.port, CHAT, {"messages": USER, "max_tokens": 4, "logit_bias": bias,
                                      "logprobs": True, "stream": True})
    n = sum(len((json.loads(p)["choices"][0].get("logprobs") or {}).get("content", []))
            for _, p in ev[:-1])
    C.ok(n == 4, "streamed logprobs cover every token", n)
    # issue 32: the end-of-turn token is not content, so it has no logprobs entry (streamed
    # and not); a bias forcing it first leaves an empty content and no entries
    eog = {k: 100 for k in bias}
    _, _, r = post_json(d.port, CHAT, {"messages": USER, "max_tokens": 4, "logit_bias": eog,
                                       "logprobs": True})
    lp = (r["choices"][0].get("logprobs") or {}).get("content", [])
    C.ok(r["choices"][0]["message"]["content"] == "" and lp == [],
         "chat logprobs leave out the end-of-turn token", r["choices"][0])
    st, _, ev = stream(d.port, CHAT, {"messages": USER, "max_tokens": 4, "logit_bias": eog,
                                      "logprobs": True, "stream": True})
    n = sum(len((json.loads(p)["choices"][0].get("logprobs") or {}).get("content", []))
            for _, p in ev[:-1])
    C.ok(n == 0, "streamed chat logprobs leave out the end-of-turn token", n)
    _, _, c = post_json(d.port, COMPL, {"prompt": "abc", "max_tokens": 4, "logprobs": 2,
                                        "logit_bias": bias})
    lp = c["choices"][0]["logprobs"]
    C.ok(lp and len(lp["tokens"]) == len(lp["token_logprobs"]) == len(lp["text_offset"]) ==
         len(lp["top_logprobs"]) == 4, "completions legacy logprobs", lp)


def check_n(d, bias):
    _, _, r = post_json(d.port, CHAT, {"messages": USER, "max_tokens": 5, "n": 2, "seed": 3,
                                       "logit_bias": bias})
    C.ok([c["index"] for c in r["choices"]] == [0, 1] and r["usage"]["completion_tokens"] == 10,
         "n=2 non-stream", r)
    st, _, ev = stream(d.port, CHAT, {"messages": USER, "max_tokens": 5, "n": 2, "seed": 3,
                                      "logit_bias": bias, "stream": True})
    chunks = [json.loads(p) for _, p in ev[:-1]]
    roles = sorted(c["choices"][0]["index"] for c in chunks if "role" in c["choices"][0]["delta"])
    fins = sorted(c["choices"][0]["index"] for c in chunks if c["choices"][0]["finish_reason"])
    C.ok(roles == [0, 1] and fins == [0, 1] and ev[-1][1] == "[DONE]", "n=2 stream", chunks[:2])
    texts = {}
    for c in chunks:
        ch = c["choices"][0]
        texts[ch["index"]] = texts.get(ch["index"], "") + (ch["delta"].get("content") or "")
    C.ok(texts.get(0) == r["choices"][0]["message"]["content"] and
         texts.get(1) == r["choices"][1]["message"]["content"], "n=2 seeds seed+i reproducible",
         (texts, r["choices"]))


def solo_and_parallel(d, bodies, streamed):
    """Texts of each body run alone, then of all at once."""
    def run(body):
        if streamed:
            st, _, ev = stream(d.port, CHAT, dict(body, stream=True))
            ok = st == 200 and ev and ev[-1][1] == "[DONE]"
            text = "".join(json.loads(p)["choices"][0]["delta"].get("content") or ""
                           for _, p in ev[:-1])
            return text if ok else None
        st, _, r = post_json(d.port, CHAT, body)
        return r["choices"][0]["message"]["content"] if st == 200 else None
    alone = [run(b) for b in bodies]
    together = [None] * len(bodies)

    def worker(i):
        together[i] = run(bodies[i])
    ts = [threading.Thread(target=worker, args=(i,)) for i in range(len(bodies))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    return alone, together


def check_determinism(d, bias):
    bodies = [{"messages": [{"role": "user", "content": "seeded %d" % i}], "max_tokens": 24,
               "temperature": 0.9, "seed": 42 + i, "logit_bias": bias} for i in range(8)]
    alone, together = solo_and_parallel(d, bodies, streamed=False)
    C.ok(alone[0] is not None and alone[0] == together[0],
         "seeded request alone == among 7 concurrent others", (alone[0], together[0]))
    again, _ = solo_and_parallel(d, bodies[:1], streamed=False)
    C.ok(again[0] == alone[0], "same seed, same text")
    alone, together = solo_and_parallel(d, bodies, streamed=True)
    C.ok(all(t is not None for t in together), "8 parallel streams all complete with [DONE]")
    C.ok(alone == together, "8 parallel streams equal their solo runs",
         [i for i in range(8) if alone[i] != together[i]])


def wait_idle(port, seconds):
    end = time.time() + seconds
    while time.time() < end:
        _, _, body = request(port, "GET", "/slots")
        if all(s["state"] == "idle" for s in json.loads(body)):
            return True
        time.sleep(0.05)
    return False


def check_cancel():
    # its own daemon with a long context: the generations below must outlast the cancel, however
    # fast decoding gets
    d = Daemon(B, MODEL, ["--slots", "1", "--ctx", "32768"], name="http_api_cancel").start()
    bias = eog_bias(d.port)
    before = metric(d.port, "deltad_requests_cancelled_total")
    body = json.dumps({"messages": USER, "max_tokens": 100000, "logit_bias": bias,
                       "stream": True})
    curl = subprocess.Popen(["curl", "-sN", "--max-time", "60", "-d", body,
                             "http://127.0.0.1:%d%s" % (d.port, CHAT)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    got = curl.stdout.read(2000)
    _, _, slots = request(d.port, "GET", "/slots")
    busy = any(s["state"] != "idle" for s in json.loads(slots))
    curl.kill()
    curl.wait()
    t0 = time.time()
    idle = wait_idle(d.port, 10)
    C.ok(len(got) > 0 and busy, "long stream running", (got[:100], slots))
    C.ok(idle, "killing the client frees the slot (%.2f s)" % (time.time() - t0))
    C.ok(metric(d.port, "deltad_requests_cancelled_total") > before, "cancel counted")
    # a non-streaming request is parked until done: the timer notices the closed socket
    before = metric(d.port, "deltad_requests_cancelled_total")
    s = socket.create_connection(("127.0.0.1", d.port), timeout=10)
    body = json.dumps({"messages": USER, "max_tokens": 100000, "logit_bias": bias}).encode()
    s.sendall(b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n%s" % (CHAT.encode(), len(body), body))
    busy, t0 = False, time.time()
    while not busy and time.time() - t0 < 5:
        _, _, slots = request(d.port, "GET", "/slots")
        busy = any(x["state"] != "idle" for x in json.loads(slots))
        time.sleep(0.02)
    time.sleep(0.2)
    s.close()
    t0 = time.time()
    idle = wait_idle(d.port, 10)
    C.ok(busy and idle, "closing a non-streaming request's connection frees the slot (%.2f s)"
         % (time.time() - t0))
    C.ok(metric(d.port, "deltad_requests_cancelled_total") > before, "non-stream cancel counted")
    C.ok(d.stop() == 0, "clean exit after SIGTERM (cancel daemon)")


def check_slowloris(d):
    trickle = socket.create_connection(("127.0.0.1", d.port), timeout=30)
    trickle.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
    silent = socket.create_connection(("127.0.0.1", d.port), timeout=30)
    silent.sendall(b"GET /health HTTP/1.1\r\nHo")
    stop = threading.Event()

    def drip():
        for ch in b"Content-Type: application/json\r\nX-Slow: " + b"z" * 100:
            if stop.is_set():
                return
            try:
                trickle.send(bytes([ch]))
            except OSError:
                return
            time.sleep(0.25)
    t = threading.Thread(target=drip)
    t.start()
    t0 = time.time()
    worst = 0
    for _ in range(5):
        s0 = time.time()
        st, _, _ = post_json(d.port, CHAT, {"messages": USER, "max_tokens": 3}, timeout=10)
        worst = max(worst, time.time() - s0)
        C.ok(st == 200, "request served while a slowloris client trickles")
    C.ok(worst < 5, "served promptly next to the slow client (worst %.2f s)" % worst)
    # the silent half-request is cut after the idle timeout
    silent.settimeout(15)
    try:
        data = silent.recv(100)
    except OSError:
        data = b""
    C.ok(data == b"" and time.time() - t0 < 14, "idle half-request closed by the idle timeout",
         data)
    stop.set()
    t.join()
    trickle.close()
    silent.close()


def check_queue_full(status):
    d = Daemon(B, MODEL, ["--slots", "1", "--queue-max", "1", "--ctx", "16384",
                          "--queue-full-status", str(status), "--retry-after", "7"],
               name="http_api_queue%d" % status).start()
    bias = eog_bias(d.port)
    # a long stream holds the only slot for as long as we like (no race with decode speed)
    body = json.dumps({"messages": USER, "max_tokens": 100000, "logit_bias": bias,
                       "stream": True})
    curl = subprocess.Popen(["curl", "-sN", "--max-time", "60", "-d", body,
                             "http://127.0.0.1:%d%s" % (d.port, CHAT)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    curl.stdout.read(2000)
    results = []

    def worker():
        results.append(post_json(d.port, CHAT, {"messages": USER, "max_tokens": 40,
                                                "logit_bias": bias}, timeout=120))
    ts = [threading.Thread(target=worker) for _ in range(3)]
    for t in ts:
        t.start()
    t0 = time.time()
    while len(results) < 2 and time.time() - t0 < 20:    # one queued, two turned away
        time.sleep(0.02)
    curl.kill()
    curl.wait()
    for t in ts:
        t.join(120)
    full = [r for r in results if r[0] == status]
    etype = "rate_limit_error" if status == 429 else "unavailable_error"
    C.ok(len(full) == 2 and all(r[1].get("retry-after") == "7" and
                                err_of(r[2]).get("type") == etype for r in full),
         "queue full -> %d with Retry-After and %s" % (status, etype),
         [(r[0], r[1].get("retry-after"), r[2]) for r in results])
    C.ok(sum(r[0] == 200 for r in results) == 1, "the queued request still completes",
         [r[0] for r in results])
    C.ok(d.stop() == 0, "clean exit after SIGTERM (queue daemon %d)" % status)


def check_auth_cors():
    key = "s3cret-key"
    d = Daemon(B, MODEL, ["--api-key", key, "--cors-origin", "https://app.example",
                          "--auth-metrics", "true", "--slots-endpoint", "false"],
               name="http_api_auth").start()
    good = {"Authorization": "Bearer " + key}
    st, _, _ = request(d.port, "GET", "/health")
    C.ok(st == 200, "health is public with a key set")
    for path in ("/v1/models", "/models", "/metrics"):
        st, hd, body = request(d.port, "GET", path)
        e = err_of(json.loads(body))
        C.ok(st == 401 and e.get("type") == "authentication_error" and
             e.get("code") == "invalid_api_key", "401 without key on %s" % path, body)
    st, _, _ = request(d.port, "GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
    C.ok(st == 401, "401 with a wrong key")
    st, _, _ = request(d.port, "GET", "/v1/models", headers={"Authorization": "Bearer " + key + "x"})
    C.ok(st == 401, "401 with a longer key")
    st, hd, _ = request(d.port, "GET", "/v1/models", headers=good)
    C.ok(st == 200 and hd.get("access-control-allow-origin") == "https://app.example",
         "200 with the key, CORS header", hd)
    st, _, _ = request(d.port, "GET", "/metrics", headers={"X-Api-Key": key})
    C.ok(st == 200, "X-Api-Key accepted")
    for path in (CHAT, "/chat/completions", COMPL, "/tokenize"):
        expect_error(d.port, path, {"messages": USER, "prompt": "x", "content": "x"}, 401,
                     "authentication_error", what="POST %s without key" % path)
    st, _, r = post_json(d.port, CHAT, {"messages": USER, "max_tokens": 2}, headers=good)
    C.ok(st == 200, "chat with the key", r)
    st, hd, _ = request(d.port, "OPTIONS", CHAT, headers={
        "Origin": "https://app.example", "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization, content-type"})
    C.ok(st == 204 and hd.get("access-control-allow-origin") == "https://app.example" and
         "POST" in hd.get("access-control-allow-methods", "") and
         "authorization" in hd.get("access-control-allow-headers", "").lower(),
         "CORS preflight answered before auth", (st, hd))
    st, _, body = request(d.port, "GET", "/slots", headers=good)
    C.ok(st == 501 and err_of(json.loads(body)).get("type") == "not_supported_error",
         "disabled /slots -> 501", body)
    # this daemon runs with the default ctx (4096, above the model's 2048 training context):
    # validation must use the engine's context, not the model's
    st, _, r = post_json(d.port, COMPL, {"prompt": [5] * 3000, "max_tokens": 1}, headers=good)
    C.ok(st == 200, "a 3000-token prompt fits ctx 4096", r)
    st, _, r = post_json(d.port, COMPL, {"prompt": [5] * 5000, "max_tokens": 1}, headers=good)
    C.ok(st == 400 and err_of(r).get("n_ctx") == 4096, "a 5000-token prompt exceeds ctx 4096", r)
    C.ok(key not in d.log_text(), "the key never appears in the log")
    C.ok(d.stop() == 0, "clean exit after SIGTERM (auth daemon)")


def check_drain():
    """SIGTERM drains: a stream in flight ends with [DONE]; /health and new requests get 503
    (unavailable_error, Retry-After) meanwhile; the daemon exits 0."""
    # the stream must outlast the checks below: the demo model decodes thousands of tokens per
    # second, so it asks for nearly the whole context and the checks start as soon as the
    # daemon logs the drain (no fixed sleep)
    d = Daemon(B, MODEL, ["--slots", "2", "--ctx", "4096", "--drain-timeout", "30"],
               name="http_api_drain").start()
    bias = eog_bias(d.port)
    body = json.dumps({"messages": USER, "max_tokens": 3900, "logit_bias": bias, "stream": True})
    curl = subprocess.Popen(["curl", "-sN", "--max-time", "60", "-d", body,
                             "http://127.0.0.1:%d%s" % (d.port, CHAT)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    first = curl.stdout.read(600)
    d.proc.send_signal(signal.SIGTERM)
    t_end = time.time() + 5
    while "drain: stopping" not in d.log_text() and time.time() < t_end:
        time.sleep(0.005)
    st_h, _, _ = request(d.port, "GET", "/health")
    st, hd, obj = post_json(d.port, CHAT, {"messages": USER, "max_tokens": 2})
    rest = curl.stdout.read()
    curl.wait()
    C.ok(first.startswith(b"data: ") and st_h == 503, "/health 503 while draining", st_h)
    C.ok(st == 503 and err_of(obj).get("type") == "unavailable_error" and "retry-after" in hd,
         "new request 503 while draining", (st, obj))
    C.ok((first + rest).rstrip().endswith(b"data: [DONE]"), "in-flight stream completes",
         (first + rest)[-200:])
    C.ok(d.stop() == 0, "drain ends with exit 0")


def check_access_log(d):
    log = d.log_text()
    C.ok(" POST /v1/chat/completions 200 " in log and " id=chatcmpl-" in log and
         " GET /health 200 " in log, "access log lines (method path status bytes time id)")


def main():
    max_body, n_ctx, slots = 65536, 2048, 4
    d = Daemon(B, MODEL, ["--slots", str(slots), "--ctx", str(n_ctx), "--max-body",
                          str(max_body), "--idle-timeout", "2", "--max-json-depth", "32"],
               name="http_api_main").start()
    bias = eog_bias(d.port)
    check_health_models(d)
    check_routes(d)
    check_limits(d, max_body)
    check_validation(d)
    check_context_overflow(d, n_ctx)
    check_tokenize(d)
    check_chat_shape(d, bias)
    check_stream(d, bias)
    check_stop(d, bias)
    check_logprobs(d, bias)
    check_n(d, bias)
    check_determinism(d, bias)
    check_cancel()
    check_slowloris(d)
    check_metrics_slots(d, slots)
    check_access_log(d)
    C.ok(d.stop() == 0, "clean exit after SIGTERM")
    check_auth_cors()
    check_drain()
    check_queue_full(429)
    check_queue_full(503)
    return C.finish()


if __name__ == "__main__":
    run_main(main, C)
