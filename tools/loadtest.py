#!/usr/bin/python3
"""loadtest.py — a mixed-traffic load test for `deltad serve` on 127.0.0.1 (issue 9).

N client threads (default 64) run for T seconds (default 120, at most 3600), each picking one
request at a time from a weighted mix:
  stream     streaming chat, SSE read to [DONE]       (time to first token, inter-token gaps)
  chat       non-streaming chat                       (usage arithmetic checked)
  compl      non-streaming /v1/completions
  cancel     streaming chat closed after the first content chunk (client disconnect)
  oversize   a body over max_body (Content-Length, or chunked without one)   -> 413 or a cut
  malformed  broken JSON / wrong types / deep nesting / bad UTF-8            -> 400
  slow       a valid request dripped a few bytes at a time over ~2 s; with a short idle_timeout
             (<= 10 s) some stall mid-headers and must be cut by the server
  resp       /v1/responses (OpenAI's Responses API), streaming or not, stored or not: a complete
             object (status completed or incomplete, usage adding up) or every event in order
             (sequence_numbers 0, 1, ..., response.created first, .completed / .incomplete last)
  msg        /v1/messages (Anthropic's Messages API), streaming or not: a message with a
             stop_reason, or message_start ... message_delta (stop_reason), message_stop
  resp_cancel, msg_cancel   those streams closed after the first delta
  front_bad  bad requests to either endpoint -> 400 in that API's own error shape
Every request must end in a complete answer or a proper error: 200 with a well-formed body or
stream ([DONE] last, a finish_reason; each front end's own end events), 429/503 with Retry-After
(busy), the expected 4xx for bad
input, or a server-side cut where the protocol allows one. Anything else counts as a failure.

The daemon this tool starts keeps at most 64 stored responses (--responses-store-max 64), so the
store is full after the warm-up and the RSS check covers the store's evictions.

A warm-up phase (the same mix, min(15, T/4) s) comes first; then the daemon's RSS
(/proc/PID/status RssAnon, once every slot is idle; VmRSS is reported too but also counts the
mmapped model's pages, which grow as prompts touch more of it) is the baseline. After the main phase the
checks are: no failed request, /slots all idle within 15 s (no leaked slot), RSS within 5% (+1
MiB of allocator slack) of the baseline without the prompt cache's RAM tier, plus that tier
up to its --cache-ram-max (16 MiB by default), the tier within its limit, and /health plus one chat request still answer. Prints requests/s, p50/p99 time
to first token and inter-token latency, outcomes by kind and failures by reason; the last line
is "loadtest: N passed, N failed" (exit status 1 on any failure).

The daemon this tool starts runs exactly as make run and the systemd units start it: its malloc
settings (one arena, a fixed 128 KiB mmap threshold) are the daemon's own (server/cli/serve.c),
so the RSS check judges the configuration users run. --glibc-default-malloc sets
MALLOC_ARENA_MAX=64 (glibc's own limit is 8 per core), with which the daemon leaves malloc at
glibc's defaults, to measure what its settings save.
LeakSanitizer (tests/e2e/test_sanitized_daemon.sh) covers unreachable memory.

Usage (python3 standard library only):
  tools/loadtest.py --build build/cpu [--model M] [--slots 8] [-c 64] [-t 120]   # starts deltad
  tools/loadtest.py --port 8080 --pid 1234 [-c 64] [-t 120]                     # a running one
  (--max-body and --idle-timeout must then match the daemon's settings)
"""

import argparse
import http.client
import json
import os
import random
import select
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "e2e"))
from harness import Daemon, request  # noqa: E402

HOST = "127.0.0.1"
CHAT, COMPL = "/v1/chat/completions", "/v1/completions"
RESP, MSG = "/v1/responses", "/v1/messages"
MIX = [("stream", 34), ("chat", 20), ("compl", 8), ("cancel", 12), ("oversize", 6),
       ("malformed", 12), ("slow", 8), ("resp", 10), ("msg", 10), ("resp_cancel", 4),
       ("msg_cancel", 4), ("front_bad", 6)]
WORDS = ("the quick brown fox jumps over a lazy dog while seven wizards quietly hex "
         "numbers like 42 and 1e3 under caf\u00e9 lights \u4e16\u754c \U0001F600").split()
MALFORMED = [b"", b"{", b"[1,2]", b'{"messages": []} x', b'{"messages":[{"role":"user","content":"\xff"}]}',
             b'{"messages":[{"role":"user","content":"a\x00b"}]}', b"[" * 100 + b"]" * 100,
             b'{"messages":[{"role":"user","content":"hi"}],"temperature":"hot"}',
             b'{"messages":[{"role":"user","content":"hi"}],"max_tokens":-1}',
             b'{"messages":"hi"}', b'{"prompt":1}', b'{"messages":[{"role":"wizard","content":"x"}]}']
# Bad requests to the front ends: (path, body, the OpenAI error.param or None for Anthropic's
# shape, which has no param).
FRONT_BAD = [
    (RESP, b'{"input": ', None), (RESP, b'{"model": "m"}', "input"),
    (RESP, b'{"input": [{"type": "computer_call"}]}', "input[0].type"),
    (RESP, b'{"input": "x", "max_output_tokens": "8"}', "max_output_tokens"),
    (RESP, b'{"input": "x", "text": {"format": {"type": "json_schema", "name": "s"}}}',
     "text.format.schema"),
    (RESP, b'{"input": "x", "tool_choice": "required"}', "tool_choice"),
    (RESP, b'{"input": "x", "previous_response_id": "resp_nope"}', "previous_response_id"),
    (MSG, b'{"model": "m", "messages": [{"role": "user", "content": "x"}]}', None),
    (MSG, b'{"model": "m", "max_tokens": 5, "messages": []}', None),
    (MSG, b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}], '
          b'"tool_choice": {"type": "tool"}}', None),
    (MSG, b'{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": '
          b'[{"type": "image"}]}]}', None),
    (MSG, b'{"model": ', None),
]
RESP_END = ("response.completed", "response.incomplete")
STOP_REASONS = ("end_turn", "max_tokens", "stop_sequence", "tool_use")
TIMEOUT = 60.0  # seconds any one request may take before it counts as a failure
# Allowed on top of the percentage: the malloc arenas of the HTTP threads hold freed request
# buffers for a while, which moves RssAnon of a ~20 MiB daemon by about 1 MiB either way.
RSS_SLACK_KIB = 1024


class Fail(Exception):
    """A request that did not end in a complete answer or a proper error."""


class ServerError(Exception):
    """A 500 or an SSE error event: a failure, unless --accept-5xx (fault-injection runs)."""


# ---- statistics -------------------------------------------------------------------------------

class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.outcomes = {}      # (kind, outcome) -> count
        self.failures = {}      # reason -> [count, example]
        self.ttft, self.itl = [], []
        self.tokens = 0
        self.n = 0

    def record(self, kind, outcome, ttft=None, gaps=(), tokens=0, reason=None):
        with self.lock:
            self.n += 1
            self.outcomes[(kind, outcome)] = self.outcomes.get((kind, outcome), 0) + 1
            if ttft is not None:
                self.ttft.append(ttft)
            self.itl.extend(gaps)
            self.tokens += tokens
            if reason:
                key = "%s: %s" % (kind, reason.split(" -- ")[0][:120])
                e = self.failures.setdefault(key, [0, reason[:400]])
                e[0] += 1

    def n_failed(self):
        return sum(c for (_, o), c in self.outcomes.items() if o == "FAIL")


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100.0 * (len(xs) - 1))))]


# ---- request bodies ---------------------------------------------------------------------------

def text(rng, lo=3, hi=24):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def chat_body(rng, stream):
    b = {"messages": [{"role": "user", "content": text(rng)}], "max_tokens": rng.randint(1, 48),
         "temperature": rng.choice([0, 0.7, 1.0]), "seed": rng.randint(0, 1 << 30)}
    if rng.random() < 0.3:
        b["messages"].insert(0, {"role": "system", "content": text(rng, 2, 6)})
    if rng.random() < 0.15:
        b["stop"] = [rng.choice(WORDS)]
    if rng.random() < 0.15:
        b["logprobs"], b["top_logprobs"] = True, rng.randint(0, 3)
    if rng.random() < 0.1:
        b["n"] = 2
    if stream:
        b["stream"] = True
        b["stream_options"] = {"include_usage": True}
    return b


def resp_body(rng, stream):
    b = {"input": text(rng), "max_output_tokens": rng.randint(1, 48), "seed": rng.randint(0, 1 << 30),
         "temperature": rng.choice([0, 0.7, 1.0]), "store": rng.random() < 0.3}
    if rng.random() < 0.3:
        b["input"] = [{"role": "user", "content": [{"type": "input_text", "text": text(rng)}]}]
    if rng.random() < 0.3:
        b["instructions"] = text(rng, 2, 6)
    if rng.random() < 0.5:
        b["reasoning"] = {"effort": "none"}
    if stream:
        b["stream"] = True
    return b


def msg_body(rng, stream):
    b = {"model": "m", "max_tokens": rng.randint(1, 48), "seed": rng.randint(0, 1 << 30),
         "temperature": rng.choice([0, 0.7, 1.0]),
         "messages": [{"role": "user", "content": text(rng)}]}
    if rng.random() < 0.3:
        b["system"] = text(rng, 2, 6)
    if rng.random() < 0.15:
        b["stop_sequences"] = [rng.choice(WORDS)]
    if rng.random() < 0.5:
        b["thinking"] = {"type": "disabled"}
    if stream:
        b["stream"] = True
    return b


# ---- outcome helpers --------------------------------------------------------------------------

def busy_or_fail(status, headers, body, what):
    """429/503 with Retry-After and an error object is 'busy'; anything else fails."""
    try:
        err = json.loads(body).get("error") if body else None
    except ValueError:
        err = None
    if status in (429, 503) and "retry-after" in headers and err:
        return "busy"
    if status == 500 and err and err.get("type") in ("server_error", "api_error") and err.get("message"):
        raise ServerError("%s: 500 %s" % (what, err.get("message")))
    raise Fail("%s: unexpected status %d -- %r" % (what, status, body[:200]))


def check_usage(u, what):
    if not u or u.get("total_tokens") != u.get("prompt_tokens", 0) + u.get("completion_tokens", 0):
        raise Fail("%s: usage does not add up -- %r" % (what, u))
    return u["completion_tokens"]


def tick(t0, first, last, gaps):
    """A delta arrived: (time to the first one, now), the gap since the last one into gaps."""
    now = time.monotonic()
    if first is None:
        return now - t0, now
    gaps.append(now - last)
    return first, now


def read_sse(r, cancel, t0):
    """Read an SSE response: returns (done, finishes, first_content_t, gaps, completion tokens,
    cancelled). Validates every payload as a JSON chunk of one id."""
    buf, done, finishes, first, last, gaps, tokens, ids = b"", False, 0, None, None, [], 0, set()
    while True:
        chunk = r.read1(65536)
        if not chunk:
            return done, finishes, first, gaps, tokens, False
        buf += chunk
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            for line in block.split(b"\n"):
                if not line.startswith(b"data: "):
                    if line and not line.startswith(b":"):
                        raise Fail("stream: a line that is neither data nor comment -- %r" % line[:100])
                    continue
                payload = line[6:]
                if done:
                    raise Fail("stream: data after [DONE]")
                if payload == b"[DONE]":
                    done = True
                    continue
                obj = json.loads(payload.decode("utf-8", "strict"))
                if "error" in obj:
                    e = obj["error"]
                    if e.get("type") == "server_error" and e.get("message"):
                        raise ServerError("stream: error event %s" % e.get("message"))
                    raise Fail("stream: error event -- %r" % e)
                ids.add(obj.get("id"))
                if len(ids) > 1:
                    raise Fail("stream: chunks of more than one id")
                if obj.get("usage"):
                    tokens = check_usage(obj["usage"], "stream")
                for ch in obj.get("choices", []):
                    if ch.get("finish_reason") in ("stop", "length"):
                        finishes += 1
                    content = (ch.get("delta") or {}).get("content")
                    if content:
                        first, last = tick(t0, first, last, gaps)
                        if cancel:
                            return done, finishes, first, gaps, tokens, True


def read_events(r, cancel, t0, what):
    """Read a front end's SSE stream (event: NAME / data: JSON with type NAME): returns (events
    [(name, obj)], first delta t, gaps, cancelled). An error event raises."""
    buf, events, first, last, gaps = b"", [], None, None, []
    while True:
        chunk = r.read1(65536)
        if not chunk:
            return events, first, gaps, False
        buf += chunk
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            name, data = None, None
            for line in block.split(b"\n"):
                if line.startswith(b"event: "):
                    name = line[7:].decode()
                elif line.startswith(b"data: "):
                    data = json.loads(line[6:].decode("utf-8", "strict"))
                elif line and not line.startswith(b":"):
                    raise Fail("%s: a line that is not event, data or comment -- %r" % (what, line[:100]))
            if data is None:
                continue
            if name != data.get("type"):
                raise Fail("%s: event %r with data of type %r" % (what, name, data.get("type")))
            err = data.get("error") if name == "error" else None
            if name == "response.failed":
                err = data["response"].get("error") or {}
            if err is not None:
                if err.get("message") and err.get("type", err.get("code")) in (
                        "server_error", "api_error", "unavailable_error"):
                    raise ServerError("%s: error event %s" % (what, err.get("message")))
                raise Fail("%s: error event -- %r" % (what, err))
            events.append((name, data))
            if name in ("response.output_text.delta", "response.reasoning_text.delta",
                        "content_block_delta"):
                first, last = tick(t0, first, last, gaps)
                if cancel:
                    return events, first, gaps, True


def check_resp_events(ev):
    """The Responses stream's order; returns the completion tokens."""
    names = [n for n, _ in ev]
    if [o.get("sequence_number") for _, o in ev] != list(range(len(ev))):
        raise Fail("resp stream: sequence_numbers not 0, 1, ... -- %r" % names[:20])
    if names[:2] != ["response.created", "response.in_progress"] or names[-1] not in RESP_END:
        raise Fail("resp stream: created / in_progress first, completed / incomplete last -- %r"
                   % (names[:3] + names[-3:]))
    if names.count("response.output_item.added") != names.count("response.output_item.done"):
        raise Fail("resp stream: output items not closed -- %r" % names)
    return check_resp(ev[-1][1]["response"], "resp stream")


def check_resp(o, what):
    st, u = o.get("status"), o.get("usage") or {}
    if o.get("object") != "response" or st not in ("completed", "incomplete"):
        raise Fail("%s: object or status -- %r" % (what, str(o)[:300]))
    if st == "incomplete" and (o.get("incomplete_details") or {}).get("reason") != "max_output_tokens":
        raise Fail("%s: incomplete without max_output_tokens -- %r" % (what, str(o)[:300]))
    if u.get("total_tokens") != u.get("input_tokens", 0) + u.get("output_tokens", 0):
        raise Fail("%s: usage does not add up -- %r" % (what, u))
    if not all(it.get("type") in ("message", "reasoning", "function_call") for it in o["output"]):
        raise Fail("%s: output item types -- %r" % (what, str(o["output"])[:300]))
    return u["output_tokens"]


def check_msg_events(ev):
    names = [n for n, _ in ev]
    if names[:1] != ["message_start"] or names[-1] != "message_stop":
        raise Fail("msg stream: message_start first, message_stop last -- %r"
                   % (names[:3] + names[-3:]))
    if names.count("content_block_start") != names.count("content_block_stop"):
        raise Fail("msg stream: content blocks not closed -- %r" % names)
    deltas = [o for n, o in ev if n == "message_delta"]
    if len(deltas) != 1 or deltas[0]["delta"].get("stop_reason") not in STOP_REASONS:
        raise Fail("msg stream: one message_delta with a stop_reason -- %r" % deltas)
    return deltas[0]["usage"]["output_tokens"]


def check_msg(o, what):
    if o.get("type") != "message" or o.get("stop_reason") not in STOP_REASONS or \
            not isinstance(o.get("content"), list):
        raise Fail("%s: type, stop_reason or content -- %r" % (what, str(o)[:300]))
    return o["usage"]["output_tokens"]


# ---- the actions ------------------------------------------------------------------------------

class Client:
    def __init__(self, cfg, stats, cid):
        self.cfg, self.stats = cfg, stats
        self.rng = random.Random(cfg.seed * 100003 + cid)

    def post(self, path, body):
        c = http.client.HTTPConnection(HOST, self.cfg.port, timeout=TIMEOUT)
        c.request("POST", path, body=json.dumps(body).encode(),
                  headers={"Content-Type": "application/json"})
        return c, c.getresponse()

    def stream(self, cancel):
        body = chat_body(self.rng, True)
        n_choices = body.get("n", 1)
        t0 = time.monotonic()
        c, r = self.post(CHAT, body)
        try:
            hd = {k.lower(): v for k, v in r.getheaders()}
            if r.status != 200:
                return busy_or_fail(r.status, hd, r.read(), "stream"), {}
            if not hd.get("content-type", "").startswith("text/event-stream"):
                raise Fail("stream: content-type %r" % hd.get("content-type"))
            done, finishes, first, gaps, tokens, cut = read_sse(r, cancel, t0)
        finally:
            c.close()  # for cancel: the disconnect the daemon must notice
        if cut:
            return "cancelled", {"ttft": first}
        if not done or finishes != n_choices:
            raise Fail("stream: ended without [DONE] or a finish_reason per choice "
                       "(done=%s, finishes=%d of %d)" % (done, finishes, n_choices))
        return "ok", {"ttft": first, "gaps": gaps, "tokens": tokens}

    def chat(self, path=CHAT):
        body = chat_body(self.rng, False)
        if path == COMPL:
            body = {"prompt": text(self.rng), "max_tokens": body["max_tokens"],
                    "temperature": body["temperature"], "seed": body["seed"]}
        c, r = self.post(path, body)
        try:
            data, hd = r.read(), {k.lower(): v for k, v in r.getheaders()}
        finally:
            c.close()
        if r.status != 200:
            return busy_or_fail(r.status, hd, data, path), {}
        obj = json.loads(data)
        ch = obj["choices"]
        if len(ch) != body.get("n", 1) or any(x.get("finish_reason") not in ("stop", "length")
                                               for x in ch):
            raise Fail("%s: choices or finish_reason wrong -- %r" % (path, data[:300]))
        for x in ch:
            t = x["message"]["content"] if path == CHAT else x["text"]
            if not isinstance(t, str):
                raise Fail("%s: text is not a string" % path)
        return "ok", {"tokens": check_usage(obj.get("usage"), path)}

    def front(self, path, cancel, stream):
        """/v1/responses or /v1/messages, streamed (maybe cancelled after the first delta) or
        not."""
        resp = path == RESP
        what = ("resp" if resp else "msg") + (" stream" if stream else "")
        body = (resp_body if resp else msg_body)(self.rng, stream)
        t0 = time.monotonic()
        c, r = self.post(path, body)
        try:
            hd = {k.lower(): v for k, v in r.getheaders()}
            if r.status != 200:
                return busy_or_fail(r.status, hd, r.read(), what), {}
            if not stream:
                o = json.loads(r.read())
                return "ok", {"tokens": (check_resp if resp else check_msg)(o, what)}
            if not hd.get("content-type", "").startswith("text/event-stream"):
                raise Fail("%s: content-type %r" % (what, hd.get("content-type")))
            ev, first, gaps, cut = read_events(r, cancel, t0, what)
        finally:
            c.close()  # for cancel: the disconnect the daemon must notice
        if cut:
            return "cancelled", {"ttft": first}
        tokens = (check_resp_events if resp else check_msg_events)(ev)
        return "ok", {"ttft": first, "gaps": gaps, "tokens": tokens}

    def front_bad(self):
        path, body, param = self.rng.choice(FRONT_BAD)
        c = http.client.HTTPConnection(HOST, self.cfg.port, timeout=TIMEOUT)
        try:
            c.request("POST", path, body=body, headers={"Content-Type": "application/json"})
            r = c.getresponse()
            data, hd = r.read(), {k.lower(): v for k, v in r.getheaders()}
        finally:
            c.close()
        if r.status in (429, 503):
            return busy_or_fail(r.status, hd, data, "front_bad"), {}
        o = json.loads(data) if data else {}
        err = o.get("error") if isinstance(o, dict) else None
        want = 404 if param == "previous_response_id" else 400
        ok = r.status == want and isinstance(err, dict) and isinstance(err.get("message"), str)
        if path == RESP:
            ok = ok and isinstance(err.get("code"), (str, type(None))) and \
                (param is None or err.get("param") == param)
        else:
            ok = ok and o.get("type") == "error" and err.get("type") == "invalid_request_error"
        if not ok:
            raise Fail("front_bad: %s %r -> %d %r" % (path, body[:60], r.status, data[:200]))
        return "rejected", {}

    def raw(self, data, drip=None):
        """Send raw bytes (optionally in drips of (size, pause)); read the whole answer."""
        s = socket.create_connection((HOST, self.cfg.port), timeout=TIMEOUT)
        try:
            if drip:
                for i in range(0, len(data), drip[0]):
                    s.sendall(data[i:i + drip[0]])
                    time.sleep(drip[1])
            else:
                s.sendall(data)
            out = b""
            while True:
                got = s.recv(65536)
                if not got:
                    return out
                out += got
        finally:
            s.close()

    def malformed(self):
        body = self.rng.choice(MALFORMED)
        path = COMPL if body.startswith(b'{"prompt"') else CHAT
        req = (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (path.encode(), len(body), body))
        out = self.raw(req)
        head, _, rest = out.partition(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.1 400"):
            raise Fail("malformed: expected 400 -- %r for %r" % (out[:200], body[:60]))
        err = json.loads(rest).get("error", {})
        if err.get("type") != "invalid_request_error" or not err.get("message"):
            raise Fail("malformed: error object -- %r" % rest[:200])
        return "rejected", {}

    def oversize(self):
        over = self.cfg.max_body + 1
        s = socket.create_connection((HOST, self.cfg.port), timeout=TIMEOUT)
        chunked = self.rng.random() < 0.3
        try:
            head = b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" % CHAT.encode()
            head += (b"Transfer-Encoding: chunked\r\n\r\n" if chunked
                     else b"Content-Length: %d\r\n\r\n" % over)
            s.sendall(head)
            sent, piece = 0, b"a" * 65536
            while sent < over + 65536:
                if select.select([s], [], [], 0)[0]:
                    break  # the answer (413) or the close came while sending
                try:
                    s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                except (BrokenPipeError, ConnectionResetError):
                    break
                sent += len(piece)
            s.settimeout(10)
            out = b""
            try:
                while True:
                    got = s.recv(65536)
                    if not got:
                        break
                    out += got
                    if b"\r\n\r\n" in out:
                        break
            except (ConnectionResetError, socket.timeout):
                pass
        finally:
            s.close()
        if out.startswith(b"HTTP/1.1 413"):
            return "rejected", {}
        if not out:
            return "cut", {}  # http.c drops a connection that keeps sending past the cap
        raise Fail("oversize: expected 413 -- %r" % out[:200])

    def slow(self):
        if self.cfg.idle_timeout <= 10 and self.rng.random() < 0.25:
            return self.stall()
        body = json.dumps({"messages": [{"role": "user", "content": text(self.rng)}],
                           "max_tokens": self.rng.randint(1, 16)}).encode()
        req = (b"POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (CHAT.encode(), len(body), body))
        pieces = 25
        out = self.raw(req, (max(1, len(req) // pieces), 2.0 / pieces))
        head, _, rest = out.partition(b"\r\n\r\n")
        status = int(head.split(b" ")[1]) if head.startswith(b"HTTP/1.1 ") else 0
        hd = {}
        for line in head.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            hd[k.decode().strip().lower()] = v.decode().strip()
        if status != 200:
            return busy_or_fail(status, hd, rest, "slow"), {}
        obj = json.loads(rest)
        return "ok", {"tokens": check_usage(obj.get("usage"), "slow")}

    def stall(self):
        """Half a request line, then silence: the server must cut it after idle_timeout."""
        s = socket.create_connection((HOST, self.cfg.port), timeout=self.cfg.idle_timeout + 10)
        try:
            s.sendall(b"POST /v1/chat/compl")
            t0 = time.monotonic()
            try:
                got = s.recv(4096)
            except ConnectionResetError:
                got = b""
            except socket.timeout:
                raise Fail("stall: connection still open %.0f s after idle_timeout" % 10)
        finally:
            s.close()
        if got and not got.startswith(b"HTTP/1.1 4"):
            raise Fail("stall: unexpected answer %r" % got[:100])
        if time.monotonic() - t0 > self.cfg.idle_timeout + 5:
            raise Fail("stall: cut only after %.1f s" % (time.monotonic() - t0))
        return "cut", {}

    def one(self, kind):
        if kind == "stream":
            return self.stream(False)
        if kind == "cancel":
            return self.stream(True)
        if kind == "chat":
            return self.chat(CHAT)
        if kind == "compl":
            return self.chat(COMPL)
        if kind in ("resp", "msg"):
            return self.front(RESP if kind == "resp" else MSG, False, self.rng.random() < 0.5)
        if kind in ("resp_cancel", "msg_cancel"):
            return self.front(RESP if kind == "resp_cancel" else MSG, True, True)
        return getattr(self, kind)()

    def run(self, deadline):
        kinds, weights = zip(*MIX)
        while time.monotonic() < deadline:
            kind = self.rng.choices(kinds, weights)[0]
            try:
                outcome, extra = self.one(kind)
                self.stats.record(kind, outcome, extra.get("ttft") if outcome == "ok" else None,
                                  extra.get("gaps", ()), extra.get("tokens", 0))
            except Fail as e:
                self.stats.record(kind, "FAIL", reason=str(e))
            except ServerError as e:
                if self.cfg.accept_5xx:
                    self.stats.record(kind, "5xx")
                else:
                    self.stats.record(kind, "FAIL", reason=str(e))
            except (OSError, ValueError, KeyError, TypeError, http.client.HTTPException) as e:
                self.stats.record(kind, "FAIL", reason="%s: %s" % (type(e).__name__, e))
            else:
                if outcome == "busy":
                    time.sleep(self.rng.uniform(0.05, 0.3))


# ---- phases and checks ------------------------------------------------------------------------

def run_phase(cfg, seconds, seed_offset, samples=None):
    """Run the clients for `seconds`; samples, when a list, gets (t, RssAnon KiB) every 2 s."""
    stats = Stats()
    deadline = time.monotonic() + seconds
    if samples is not None:
        def sample():
            t0 = time.monotonic()
            while time.monotonic() < deadline:
                samples.append((time.monotonic() - t0, rss_kib(cfg.pid)[1]))
                time.sleep(2.0)
        threading.Thread(target=sample, daemon=True).start()
    threads = []
    for i in range(cfg.clients):
        cl = Client(cfg, stats, i + seed_offset)
        t = threading.Thread(target=cl.run, args=(deadline,), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(max(0.1, deadline + TIMEOUT + 15 - time.monotonic()))
    hung = sum(t.is_alive() for t in threads)
    if hung:
        stats.record("client", "FAIL", reason="%d client threads still blocked after the run" % hung)
    return stats


def ram_tier_bytes(port):
    """deltad_prompt_cache_ram_bytes from /metrics (0 when absent)."""
    try:
        st, _, body = request(port, "GET", "/metrics")
        for line in body.decode().splitlines():
            if line.startswith("deltad_prompt_cache_ram_bytes "):
                return int(float(line.split()[1]))
    except (OSError, ValueError):
        pass
    return 0


def slots_idle(port, wait_s=15.0):
    deadline = time.monotonic() + wait_s
    slots = None
    while time.monotonic() < deadline:
        try:
            st, _, body = request(port, "GET", "/slots", timeout=5)
            slots = json.loads(body) if st == 200 else None
            if slots is not None and all(s.get("state") == "idle" for s in slots):
                return True, slots
        except (OSError, ValueError):
            pass
        time.sleep(0.2)
    return False, slots


def rss_kib(pid):
    """(VmRSS, RssAnon) in KiB. The check uses RssAnon: VmRSS also counts the pages of the
    mmapped model file, which grow as prompts touch more embedding rows (not a leak)."""
    vals = {}
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon"):
                vals[k] = int(v.split()[0])
    return vals.get("VmRSS", 0), vals.get("RssAnon", 0)


def rss_settled(pid):
    """The median of five readings 0.3 s apart, once idle (one reading can catch a thread's
    arena mid-release)."""
    reads = []
    for _ in range(5):
        reads.append(rss_kib(pid))
        time.sleep(0.3)
    reads.sort(key=lambda r: r[1])
    return reads[2]


def still_serves(port, tries=1):
    """/health and a chat request answer; with injected step failures (--accept-5xx) a few
    tries, since the chat request itself may meet a failing step."""
    for _ in range(tries):
        try:
            st, _, _ = request(port, "GET", "/health", timeout=10)
            st2, _, body = request(port, "POST", CHAT, {"messages": [{"role": "user", "content": "hi"}],
                                                         "max_tokens": 2},
                                   {"Content-Type": "application/json"}, timeout=30)
            if st == 200 and st2 == 200 and json.loads(body)["usage"]["completion_tokens"] >= 1:
                return True
        except (OSError, ValueError, KeyError):
            pass
    return False


def report(cfg, stats, secs, checks):
    print("loadtest: %d clients x %.0f s against %s:%d (pid %d)" %
          (cfg.clients, secs, HOST, cfg.port, cfg.pid))
    gen = sum(c for (k, o), c in stats.outcomes.items() if o == "ok" and k in ("stream", "chat", "compl", "slow"))
    print("requests: %d in %.1f s = %.1f req/s; completed generations %.1f/s; %d completion tokens "
          "(%.1f tok/s)" % (stats.n, secs, stats.n / secs, gen / secs, stats.tokens, stats.tokens / secs))
    print("time to first token (streams): p50 %.1f ms, p99 %.1f ms (n=%d)" %
          (pct(stats.ttft, 50) * 1e3, pct(stats.ttft, 99) * 1e3, len(stats.ttft)))
    print("inter-token latency (streams): p50 %.1f ms, p99 %.1f ms (n=%d)" %
          (pct(stats.itl, 50) * 1e3, pct(stats.itl, 99) * 1e3, len(stats.itl)))
    kinds = sorted({k for k, _ in stats.outcomes})
    outs = sorted({o for _, o in stats.outcomes})
    print("outcomes by kind:  %-10s" % "" + "".join("%10s" % o for o in outs))
    for k in kinds:
        print("  %-26s" % k + "".join("%10d" % stats.outcomes.get((k, o), 0) for o in outs))
    if stats.failures:
        print("failures by reason:")
        for key, (n, example) in sorted(stats.failures.items(), key=lambda x: -x[1][0]):
            print("  %5d  %s\n         e.g. %s" % (n, key, example))
    passed = 0
    for name, ok, detail in checks:
        print("check: %-58s %s%s" % (name, "PASS" if ok else "FAIL", ("  (" + detail + ")") if detail else ""))
        passed += ok
    print("loadtest: %d passed, %d failed" % (passed, len(checks) - passed))
    return passed == len(checks)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-c", "--clients", type=int, default=64)
    ap.add_argument("-t", "--seconds", type=float, default=120)
    ap.add_argument("--warmup", type=float, default=None, help="default min(15, T/4)")
    ap.add_argument("--port", type=int, help="a running daemon on 127.0.0.1 (needs --pid)")
    ap.add_argument("--pid", type=int, help="its process id, for RSS")
    ap.add_argument("--build", help="start BUILD/deltad instead")
    ap.add_argument("--model", help="default BUILD/models/tiny-qwen35.gguf")
    ap.add_argument("--slots", type=int, default=8)
    ap.add_argument("--queue-max", type=int, default=32)
    ap.add_argument("--max-body", type=int, default=1 << 20)
    ap.add_argument("--idle-timeout", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="also write the figures to this file")
    ap.add_argument("--accept-5xx", action="store_true",
                    help="a 500 / SSE server_error counts as a proper error (fault injection)")
    ap.add_argument("--rss-tolerance", type=float, default=5.0,
                    help="allowed RSS growth in percent; negative: no RSS check (sanitizer builds)")
    ap.add_argument("--env", action="append", default=[],
                    help="VAR=VALUE for the daemon started with --build (repeatable)")
    ap.add_argument("--glibc-default-malloc", action="store_true",
                    help="start the daemon with glibc's many arenas (MALLOC_ARENA_MAX=64) "
                    "instead of its own malloc settings")
    ap.add_argument("--cache-ram-max", type=int, default=16 << 20,
                    help="the prompt cache's RAM tier of the daemon started with --build, bytes; "
                    "the RSS check allows it to fill up (issue 36)")
    ap.add_argument("--daemon-arg", action="append", default=[],
                    help="one more argument for the daemon started with --build (repeatable)")
    cfg = ap.parse_args()
    if not (1 <= cfg.clients <= 512 and 1 <= cfg.seconds <= 3600):
        ap.error("clients must be 1..512 and seconds 1..3600")
    daemon, ok = None, False
    if cfg.build:
        os.makedirs(os.path.join(cfg.build, "test-logs"), exist_ok=True)
        if cfg.glibc_default_malloc:
            cfg.env = ["MALLOC_ARENA_MAX=64"] + cfg.env
        for kv in cfg.env:
            k, _, v = kv.partition("=")
            os.environ[k] = v
        model = cfg.model or os.path.join(cfg.build, "models", "tiny-qwen35.gguf")
        daemon = Daemon(cfg.build, model, ["--slots", str(cfg.slots), "--queue-max", str(cfg.queue_max),
                                           "--max-body", str(cfg.max_body), "--idle-timeout",
                                           str(cfg.idle_timeout), "--max-conns", "1024",
                                           "--http-threads", "8", "--log-level", "warn",
                                           "--responses-store-max", "64", "--cache-ram-max",
                                           str(cfg.cache_ram_max)] +
                        cfg.daemon_arg,
                        name="loadtest-deltad").start()
        cfg.port, cfg.pid = daemon.port, daemon.proc.pid
    elif not (cfg.port and cfg.pid):
        ap.error("give --build, or --port and --pid of a running daemon")
    warm = cfg.warmup if cfg.warmup is not None else min(15.0, cfg.seconds / 4)
    try:
        wstats = run_phase(cfg, warm, 0)
        idle0, _ = slots_idle(cfg.port)
        time.sleep(1.0)
        (vm0, rss0) = rss_settled(cfg.pid)
        ram0 = ram_tier_bytes(cfg.port)
        t0 = time.monotonic()
        samples = []
        stats = run_phase(cfg, cfg.seconds, 1000, samples)
        secs = time.monotonic() - t0
        idle, slots = slots_idle(cfg.port)
        time.sleep(1.0)
        (vm1, rss1) = rss_settled(cfg.pid)
        ram1 = ram_tier_bytes(cfg.port)
        serves = still_serves(cfg.port, 5 if cfg.accept_5xx else 1)
        growth = (rss1 - rss0) * 100.0 / rss0 if rss0 else float("nan")
        # the prompt cache's RAM tier may fill up to its limit during the run: allowed, and
        # nothing beyond it (a daemon started elsewhere: its tier counts as already full)
        room = max(0, cfg.cache_ram_max - ram0) // 1024 if cfg.build else 0
        checks = [
            ("every request answered completely or with a proper error", stats.n_failed() == 0 and
             wstats.n_failed() == 0, "%d failed of %d" % (stats.n_failed() + wstats.n_failed(),
                                                          stats.n + wstats.n)),
            ("/slots all idle after the run (no leaked slot)", idle0 and idle,
             "" if idle else json.dumps(slots)[:200]),
            ("RSS (anonymous) within %g%% of the post-warm-up value" % cfg.rss_tolerance
             if cfg.rss_tolerance >= 0 else "RSS (anonymous) reported, not checked",
             cfg.rss_tolerance < 0 or (rss0 > 0 and rss1 <= (rss0 - ram0 // 1024) *
                                       (1 + cfg.rss_tolerance / 100) + RSS_SLACK_KIB +
                                       ram0 // 1024 + room),
             "RssAnon %.1f -> %.1f MiB, %+.1f%%; VmRSS %.1f -> %.1f MiB; prompt-cache RAM tier "
             "%.1f -> %.1f MiB (room %.1f MiB)%s" %
             (rss0 / 1024, rss1 / 1024, growth, vm0 / 1024, vm1 / 1024, ram0 / 1048576.0,
              ram1 / 1048576.0, room / 1024, ", not checked" if cfg.rss_tolerance < 0 else "")),
            ("the prompt cache's RAM tier within cache_ram_max", not cfg.build or
             ram1 <= cfg.cache_ram_max, "%d of %d bytes" % (ram1, cfg.cache_ram_max)),
            ("the daemon still answers /health and a chat request", serves, ""),
        ]
        for (k, o), c in wstats.outcomes.items():
            if o == "FAIL":
                stats.outcomes[("warmup-" + k, o)] = c
        stats.failures.update({"warmup " + k: v for k, v in wstats.failures.items()})
        if samples:
            print("RssAnon during the run (MiB): " + " ".join(
                "%.0fs:%.1f" % (t, k / 1024) for t, k in samples[::max(1, len(samples) // 12)]))
        ok = report(cfg, stats, secs, checks)
        if cfg.json:
            with open(cfg.json, "w") as f:
                json.dump({"clients": cfg.clients, "seconds": secs, "requests": stats.n,
                           "req_per_s": stats.n / secs, "tokens": stats.tokens,
                           "ttft_p50_ms": pct(stats.ttft, 50) * 1e3, "ttft_p99_ms": pct(stats.ttft, 99) * 1e3,
                           "itl_p50_ms": pct(stats.itl, 50) * 1e3, "itl_p99_ms": pct(stats.itl, 99) * 1e3,
                           "outcomes": {"%s/%s" % k: v for k, v in stats.outcomes.items()},
                           "failures": stats.failures, "rss_anon_kib": [rss0, rss1],
                           "vm_rss_kib": [vm0, vm1], "rss_anon_samples": samples,
                           "checks": [(n, bool(o)) for n, o, _ in checks]}, f, indent=1)
    finally:
        if daemon:
            rc = daemon.stop()
            if rc != 0:
                print("loadtest: the daemon exited with %r after SIGTERM; see %s" % (rc, daemon.log_path))
                ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
