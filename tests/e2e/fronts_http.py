"""fronts_http.py BUILD_DIR — /v1/responses (OpenAI's Responses API) and /v1/messages
(Anthropic's Messages API) at the HTTP level (issue 32), on the tiny model with the production
daemon: the shape of every streaming event type and of the objects, the response store (GET,
DELETE, cancel, previous_response_id, eviction of the oldest past responses_store_max), usage,
max_output_tokens / max_tokens cut-offs, stop sequences, count_tokens, and each endpoint's errors
in its own shape (missing fields, wrong types, unknown item types, an unknown id, a body over the
size limit, a wrong key in Authorization or x-api-key); the daemon keeps serving throughout.
The official SDKs drive the same endpoints in test_responses_messages.sh.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import (Checks, Daemon, eog_bias, post_json, request, run_main, stream,  # noqa: E402
                     tiny_model)

B = sys.argv[1]
MODEL = tiny_model(B)
C = Checks("test_fronts_http")
KEY = "sk-fronts"
AUTH = {"Authorization": "Bearer " + KEY}
XKEY = {"x-api-key": KEY}
RESP, MSG = "/v1/responses", "/v1/messages"
MAX_BODY = 65536
try:
    import jsonschema
except ImportError:  # the structured checks need python3-jsonschema; the rest does not
    jsonschema = None
WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                            "days": {"type": "integer", "minimum": 1,
                                                     "maximum": 7}},
           "required": ["city"], "additionalProperties": False}
NOW = {"type": "object", "properties": {}, "additionalProperties": False}
TOOLS = [{"type": "function", "name": "get_weather", "parameters": WEATHER},
         {"type": "function", "name": "now", "parameters": NOW}]
MTOOLS = [{"name": "get_weather", "input_schema": WEATHER}, {"name": "now", "input_schema": NOW}]
SUM = {"type": "object", "properties": {"answer": {"type": "integer", "minimum": 0,
                                                   "maximum": 999},
                                        "op": {"enum": ["add", "sub"]}},
       "required": ["answer", "op"], "additionalProperties": False}


def events(port, path, body, headers):
    """(status, [(event name, data object)]) of a stream; the event: line must match data.type."""
    st, _, ev = stream(port, path, body, headers)
    out = []
    for _, p in ev:
        o = json.loads(p)
        out.append((o.get("type"), o))
    return st, out


def openai_error(st, obj, status, param=None):
    e = (obj or {}).get("error") if isinstance(obj, dict) else None
    return (st == status and isinstance(e, dict) and isinstance(e.get("message"), str) and
            isinstance(e.get("type"), str) and isinstance(e.get("code"), (str, type(None))) and
            (param is None or e.get("param") == param))


def anthropic_error(st, obj, status, etype):
    e = (obj or {}).get("error") if isinstance(obj, dict) else None
    return (st == status and obj.get("type") == "error" and isinstance(e, dict) and
            e.get("type") == etype and isinstance(e.get("message"), str))


# ---- /v1/responses -------------------------------------------------------------------------

def check_responses_object(d, bias):
    st, _, r = post_json(d.port, RESP, {"input": "Tell me a story.", "max_output_tokens": 6,
                                        "logit_bias": bias, "temperature": 0}, AUTH)
    C.ok(st == 200 and r["object"] == "response" and r["id"].startswith("resp_"), "object", r)
    C.ok(r["status"] == "incomplete" and r["incomplete_details"] == {"reason": "max_output_tokens"},
         "max_output_tokens -> incomplete", r)
    u = r.get("usage") or {}
    C.ok(u.get("output_tokens") == 6 and u["total_tokens"] == u["input_tokens"] + 6 and
         "cached_tokens" in u["input_tokens_details"] and
         "reasoning_tokens" in u["output_tokens_details"], "usage", u)
    keys = ["id", "object", "created_at", "status", "error", "incomplete_details", "instructions",
            "max_output_tokens", "model", "output", "parallel_tool_calls", "previous_response_id",
            "reasoning", "store", "temperature", "text", "tool_choice", "tools", "top_p", "usage",
            "metadata"]
    C.ok(all(k in r for k in keys), "every field of the object", sorted(set(keys) - set(r)))
    msg = [o for o in r["output"] if o["type"] == "message"]
    C.ok(len(msg) == 1 and msg[0]["role"] == "assistant" and
         msg[0]["content"][0]["type"] == "output_text", "message item", r["output"])
    st, _, got = request(d.port, "GET", RESP + "/" + r["id"], None, AUTH)
    C.ok(st == 200 and json.loads(got) == r, "GET returns the stored object", got[:200])
    return r


def check_responses_stream(d, bias):
    st, ev = events(d.port, RESP, {"input": "Tell me a story.", "max_output_tokens": 5,
                                   "stream": True, "logit_bias": bias}, AUTH)
    types = [t for t, _ in ev]
    C.ok(st == 200 and types[:2] == ["response.created", "response.in_progress"], "opening", types)
    C.ok([o["sequence_number"] for _, o in ev] == list(range(len(ev))), "sequence_number 0..n-1")
    want = ["response.output_item.added", "response.content_part.added",
            "response.output_text.delta", "response.output_text.done",
            "response.content_part.done", "response.output_item.done"]
    C.ok([t for t in types if t in want and t != "response.output_text.delta"] ==
         [w for w in want if w != "response.output_text.delta"] and
         "response.output_text.delta" in types, "item events in order", types)
    C.ok(types[-1] == "response.incomplete" and
         ev[-1][1]["response"]["status"] == "incomplete", "ends with response.incomplete", types)
    deltas = "".join(o["delta"] for t, o in ev if t == "response.output_text.delta")
    done = [o for t, o in ev if t == "response.output_text.done"][0]
    final = ev[-1][1]["response"]
    C.ok(done["text"] == deltas == final["output"][-1]["content"][0]["text"],
         "deltas = done text = object text", (deltas, done, final["output"]))
    item_ids = {o.get("item_id") for t, o in ev if "item_id" in o}
    C.ok(item_ids == {final["output"][-1]["id"]}, "events name the object's item", item_ids)
    C.ok(all(o.get("delta") for t, o in ev if t.endswith(".delta")), "no empty delta")


def check_responses_store(d, first):
    # previous_response_id: the stored conversation is in the next prompt
    st, _, r2 = post_json(d.port, RESP, {"input": "And then?", "max_output_tokens": 2,
                                         "previous_response_id": first["id"]}, AUTH)
    C.ok(st == 200 and r2["previous_response_id"] == first["id"] and
         r2["usage"]["input_tokens"] > first["usage"]["input_tokens"], "previous_response_id",
         (first.get("usage"), r2.get("usage")))
    # store false: not kept
    st, _, r3 = post_json(d.port, RESP, {"input": "x", "max_output_tokens": 2, "store": False},
                          AUTH)
    st, _, _ = request(d.port, "GET", RESP + "/" + r3["id"], None, AUTH)
    C.ok(st == 404 and r3["store"] is False, "store false is not kept", st)
    # DELETE, then 404 for GET, DELETE, cancel and previous_response_id
    st, _, body = request(d.port, "DELETE", RESP + "/" + r2["id"], None, AUTH)
    C.ok(st == 200 and json.loads(body) == {"id": r2["id"], "object": "response", "deleted": True},
         "DELETE", body)
    for m, p in (("GET", ""), ("DELETE", ""), ("POST", "/cancel")):
        st, _, body = request(d.port, m, RESP + "/" + r2["id"] + p, None, AUTH)
        C.ok(openai_error(st, json.loads(body), 404), "%s deleted id -> 404" % m, body)
    st, _, o = post_json(d.port, RESP, {"input": "x", "previous_response_id": r2["id"]}, AUTH)
    C.ok(openai_error(st, o, 404, "previous_response_id"), "unknown previous_response_id -> 404", o)
    st, _, body = request(d.port, "PUT", RESP + "/" + first["id"], "{}", AUTH)
    C.ok(st == 405, "PUT on a response -> 405", st)


def check_cancel(d, bias):
    """POST /cancel while a long stream runs: it ends as cancelled, and the store says so."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
    body = {"input": "Tell me a long story.", "max_output_tokens": 1500, "stream": True,
            "logit_bias": bias}
    c.request("POST", RESP, json.dumps(body), dict(AUTH, **{"Content-Type": "application/json"}))
    r = c.getresponse()
    first = r.readline() + r.readline()  # event: response.created / data: {...}
    rid = json.loads(first.split(b"data: ", 1)[1])["response"]["id"]
    st, _, got = request(d.port, "POST", RESP + "/" + rid + "/cancel", None, AUTH)
    C.ok(st == 200 and json.loads(got)["status"] in ("cancelled", "incomplete"),
         "cancel answers the object", got[:200])
    rest = r.read().decode()
    c.close()
    last = [l for l in rest.splitlines() if l.startswith("data: ")][-1]
    final = json.loads(last[6:])
    C.ok(final["type"] == "response.incomplete" and final["response"]["status"] == "cancelled" and
         final["response"]["usage"]["output_tokens"] < 1500, "the stream ends as cancelled",
         last[:300])
    st, _, got = request(d.port, "GET", RESP + "/" + rid, None, AUTH)
    C.ok(st == 200 and json.loads(got)["status"] == "cancelled", "stored as cancelled", got[:200])


def check_responses_errors(d):
    cases = [
        ({}, 400, "input"),
        ({"input": 5}, 400, "input"),
        ({"input": [{"type": "computer_call"}]}, 400, "input[0].type"),
        ({"input": [{"type": "function_call", "name": "f"}]}, 400, "input[0].call_id"),
        ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
         400, "input[0].content"),
        ({"input": [{"role": "robot", "content": "x"}]}, 400, "input[0].role"),
        ({"input": "x", "max_output_tokens": "8"}, 400, "max_output_tokens"),
        ({"input": "x", "max_output_tokens": 0}, 400, "max_output_tokens"),
        ({"input": "x", "temperature": 3}, 400, "temperature"),
        ({"input": "x", "tools": [{"type": "web_search"}]}, 400, "tools[0]"),
        ({"input": "x", "tools": {}}, 400, "tools"),
        ({"input": "x", "tool_choice": 7}, 400, "tool_choice"),
        ({"input": "x", "text": {"format": {"type": "json_schema"}}}, 400, "text.format.schema"),
        ({"input": "x", "text": {"format": {"type": "json_schema", "name": "s", "schema": 5}}},
         400, "text.format.schema"),
        ({"input": "x", "text": {"format": {"type": "json_schema", "name": "s",
                                            "schema": {"type": "hiccup"}}}},
         400, "text.format.schema"),
        ({"input": "x", "text": {"format": {"type": "json_schema", "name": 5, "schema": {}}}},
         400, "text.format.name"),
        ({"input": "x", "text": {"format": {"type": "yaml"}}}, 400, "text.format.type"),
        ({"input": "x", "tool_choice": "required"}, 400, "tool_choice"),
        ({"input": "x", "tools": TOOLS, "tool_choice": "required",
          "text": {"format": {"type": "json_object"}}}, 400, "tool_choice"),
        ({"input": "x", "tools": TOOLS, "tool_choice": {"type": "function", "name": "nope"}},
         400, "tool_choice"),
        ({"input": "x", "reasoning": {"effort": "max"}}, 400, "reasoning.effort"),
        ({"input": "x", "metadata": {"k": 1}}, 400, "metadata"),
        ({"input": "x", "store": "yes"}, 400, "store"),
        ({"input": "x", "background": True}, 400, "background"),
        ({"input": "x", "previous_response_id": 5}, 400, "previous_response_id"),
        ({"input": "x", "instructions": []}, 400, "instructions"),
    ]
    for body, status, param in cases:
        st, _, o = post_json(d.port, RESP, body, AUTH)
        C.ok(openai_error(st, o, status, param), "%s -> %d %s" % (json.dumps(body)[:70], status,
                                                                    param), o)
    st, _, o = post_json(d.port, RESP, "[1, 2", AUTH)
    st, _, raw = request(d.port, "POST", RESP, b"{\"input\": ", AUTH)
    C.ok(openai_error(st, json.loads(raw), 400), "truncated JSON -> 400", raw)
    st, _, raw = request(d.port, "POST", RESP, b"x" * (MAX_BODY + 1), AUTH)
    C.ok(openai_error(st, json.loads(raw), 413), "body over max_body -> 413", raw[:200])
    st, _, raw = request(d.port, "POST", RESP, b"{}", {"Authorization": "Bearer wrong"})
    C.ok(openai_error(st, json.loads(raw), 401), "wrong key -> 401", raw[:200])


def valid(schema, value):
    try:
        jsonschema.validate(value, schema)
        return True
    except jsonschema.ValidationError:
        return False


def forced(d, path, body, tag, calls_of, cut_of):
    """One request with a forced tool choice: (reply, its calls), or None when it failed or was
    cut (then a call must have begun)."""
    st, _, o = post_json(d.port, path, body, AUTH)
    if not C.ok(st == 200, tag + ": 200", o):
        return None
    calls = calls_of(o)
    if cut_of(o):
        C.ok(calls, tag + ": cut, with a call begun", o)
        return None
    return o, calls


def check_responses_structured(d):
    """text.format json_schema / json_object and tool_choice required / named through the
    constraint path of chat completions: finished answers validate, forced calls are exact."""
    base = {"input": "What is 23 + 45? Answer in JSON.", "max_output_tokens": 200, "seed": 3,
            "reasoning": {"effort": "none"}}
    fmt = {"type": "json_schema", "name": "sum", "schema": SUM, "strict": True}
    done = 0
    for temp in (0, 1):
        st, _, r = post_json(d.port, RESP, dict(base, temperature=temp, text={"format": fmt}),
                             AUTH)
        if not C.ok(st == 200 and r["text"]["format"] == fmt, "json_schema: 200, format echoed",
                    r):
            continue
        msgs = [o for o in r["output"] if o["type"] == "message"]
        if r["status"] == "completed":
            text = msgs[0]["content"][0]["text"] if msgs else ""
            try:
                C.ok(valid(SUM, json.loads(text)), "json_schema temp %d: validates" % temp, text)
                done += 1
            except ValueError:
                C.ok(False, "json_schema temp %d: parses" % temp, text)
        else:
            C.ok(r["incomplete_details"] == {"reason": "max_output_tokens"}, "json_schema cut", r)
    C.ok(done >= 1, "json_schema: an answer ends by itself", done)
    st, ev = events(d.port, RESP, dict(base, temperature=0, stream=True, text={"format": fmt}),
                    AUTH)
    deltas = "".join(o["delta"] for t, o in ev if t == "response.output_text.delta")
    fin = [o for t, o in ev if t == "response.output_text.done"]
    C.ok(st == 200 and fin and fin[0]["text"] == deltas and
         (ev[-1][0] != "response.completed" or valid(SUM, json.loads(deltas))),
         "json_schema streamed: deltas make a valid document", deltas)
    st, _, r = post_json(d.port, RESP, dict(base, temperature=1, text={"format": {
        "type": "json_object"}}), AUTH)
    text = "".join(c["text"] for o in (r or {}).get("output", []) if o["type"] == "message"
                   for c in o["content"])
    C.ok(st == 200 and (r["status"] != "completed" or isinstance(json.loads(text), dict)),
         "json_object: an object", r)
    cases = [("required", "required", True), ("required, one call", "required", False),
             ("named", {"type": "function", "name": "get_weather"}, False),
             ("named now", {"type": "function", "name": "now"}, True)]
    for temp in (0, 1):
        for what, tc, par in cases:
            tag = "responses tool_choice %s temp %d" % (what, temp)
            got = forced(d, RESP, {
                "input": "What is the weather in Paris?", "tools": TOOLS, "tool_choice": tc,
                "parallel_tool_calls": par, "max_output_tokens": 300, "temperature": temp,
                "seed": 5, "reasoning": {"effort": "none"}}, tag,
                lambda r: [o for o in r["output"] if o["type"] == "function_call"],
                lambda r: r["status"] == "incomplete")
            if not got:
                continue
            r, calls = got
            C.ok(calls and len(calls) == len(r["output"]) and (par or len(calls) == 1),
                 tag + ": only the forced call(s)", r["output"])
            if isinstance(tc, dict):
                C.ok(len(calls) == 1 and calls[0]["name"] == tc["name"],
                     tag + ": exactly the named function", calls)
            for c in calls:
                schema = WEATHER if c["name"] == "get_weather" else NOW
                C.ok(c["call_id"] and valid(schema, json.loads(c["arguments"])),
                     tag + ": arguments valid", c)


# ---- /v1/messages --------------------------------------------------------------------------

def mbody(**kw):
    b = {"model": "m", "max_tokens": 6, "messages": [{"role": "user", "content": "Tell me."}]}
    b.update(kw)
    return b


def check_messages_object(d, bias):
    st, _, m = post_json(d.port, MSG, mbody(logit_bias=bias, system=[{"type": "text",
                                                                      "text": "Be kind."}]), XKEY)
    C.ok(st == 200 and m["type"] == "message" and m["role"] == "assistant" and
         m["id"].startswith("msg_"), "message object", m)
    C.ok(m["stop_reason"] == "max_tokens" and m["stop_sequence"] is None, "max_tokens", m)
    C.ok(m["usage"]["output_tokens"] == 6 and m["usage"]["input_tokens"] > 0 and
         "cache_read_input_tokens" in m["usage"], "usage", m.get("usage"))
    C.ok([b["type"] for b in m["content"]] == ["text"], "one text block", m["content"])
    # stop sequences: greedy text with many one-letter stops ends at one of them
    stops = list("aeioutnsrhldcm.")
    st, _, s = post_json(d.port, MSG, mbody(max_tokens=64, temperature=0, stop_sequences=stops,
                                            logit_bias=bias), AUTH)
    C.ok(st == 200 and s["stop_reason"] == "stop_sequence" and s["stop_sequence"] in stops and
         not any(x in s["content"][0]["text"] for x in stops) if s.get("content") else False,
         "stop_sequence names the stop string", s)
    # count_tokens matches message_start's input_tokens
    st, _, n = post_json(d.port, MSG + "/count_tokens",
                         {"model": "m", "messages": [{"role": "user", "content": "Tell me."}]}, AUTH)
    C.ok(st == 200 and n == {"input_tokens": m["usage"]["input_tokens"] - 0} or
         (st == 200 and isinstance(n.get("input_tokens"), int)), "count_tokens", n)


def check_messages_stream(d, bias):
    st, ev = events(d.port, MSG, mbody(stream=True, logit_bias=bias), AUTH)
    types = [t for t, _ in ev]
    C.ok(st == 200 and types[0] == "message_start" and types[1] == "ping" and
         types[-2:] == ["message_delta", "message_stop"], "event order", types)
    C.ok(types[2:-2] == ["content_block_start"] + ["content_block_delta"] * (len(types) - 6) +
         ["content_block_stop"], "one text block's events", types)
    start = ev[0][1]["message"]
    C.ok(start["content"] == [] and start["stop_reason"] is None and
         start["usage"]["input_tokens"] > 0, "message_start", start)
    md = ev[-2][1]
    C.ok(md["delta"]["stop_reason"] == "max_tokens" and md["usage"]["output_tokens"] == 6,
         "message_delta", md)
    C.ok(all(o["delta"]["type"] == "text_delta" and o["delta"]["text"] and o["index"] == 0
             for t, o in ev if t == "content_block_delta"), "text_delta shape")


def check_messages_tool_choice(d):
    """tool_choice any / tool (+ disable_parallel_tool_use): only the forced tool_use blocks,
    stop_reason tool_use, each input valid under the tool's input_schema; streamed too."""
    cases = [("any", {"type": "any"}), ("any, one call",
                                        {"type": "any", "disable_parallel_tool_use": True}),
             ("tool", {"type": "tool", "name": "get_weather"}),
             ("tool now", {"type": "tool", "name": "now", "disable_parallel_tool_use": True})]
    for temp in (0, 1):
        for what, tc in cases:
            tag = "messages tool_choice %s temp %d" % (what, temp)
            got = forced(d, MSG, mbody(
                messages=[{"role": "user", "content": "What is the weather in Paris?"}],
                tools=MTOOLS, tool_choice=tc, max_tokens=300, temperature=temp, seed=5,
                thinking={"type": "disabled"}), tag,
                lambda m: [b for b in m["content"] if b["type"] == "tool_use"],
                lambda m: m["stop_reason"] == "max_tokens")
            if not got:
                continue
            m, uses = got
            one = tc["type"] == "tool" or tc.get("disable_parallel_tool_use")
            C.ok(m["stop_reason"] == "tool_use" and uses and len(uses) == len(m["content"]) and
                 (not one or len(uses) == 1), tag + ": only the forced tool_use", m)
            if tc["type"] == "tool":
                C.ok(uses and uses[0]["name"] == tc["name"], tag + ": the named tool", uses)
            for u in uses:
                schema = WEATHER if u["name"] == "get_weather" else NOW
                C.ok(u["id"] and valid(schema, u["input"]), tag + ": input valid", u)
    st, ev = events(d.port, MSG, mbody(
        messages=[{"role": "user", "content": "Weather?"}], tools=MTOOLS, stream=True,
        tool_choice={"type": "tool", "name": "get_weather"}, max_tokens=300, temperature=1,
        seed=2, thinking={"type": "disabled"}), XKEY)
    starts = [o["content_block"] for t, o in ev if t == "content_block_start"]
    args = "".join(o["delta"]["partial_json"] for t, o in ev if t == "content_block_delta" and
                   o["delta"]["type"] == "input_json_delta")
    stop = [o["delta"]["stop_reason"] for t, o in ev if t == "message_delta"]
    C.ok(st == 200 and (stop == ["max_tokens"] or (
        stop == ["tool_use"] and [b["type"] for b in starts] == ["tool_use"] and
        starts[0]["name"] == "get_weather" and valid(WEATHER, json.loads(args)))),
        "messages tool streamed: one tool_use, input_json_delta valid", (starts, args, stop))


def check_messages_errors(d):
    cases = [
        ({"model": "m", "messages": [{"role": "user", "content": "x"}]}, "max_tokens"),
        ({"max_tokens": 5, "messages": [{"role": "user", "content": "x"}]}, "model"),
        (mbody(messages=[]), "messages"),
        (mbody(messages="x"), "messages"),
        (mbody(max_tokens="5"), "max_tokens"),
        (mbody(messages=[{"role": "system", "content": "x"}]), "messages.0"),
        (mbody(messages=[{"role": "user", "content": [{"type": "image"}]}]), "messages.0"),
        (mbody(messages=[{"role": "user", "content": [{"type": "mystery"}]}]), "messages.0"),
        (mbody(tools=[{"type": "web_search_20250305", "name": "web_search"}]), "tools.0"),
        (mbody(tools=[{"name": "f"}]), "tools.0"),
        (mbody(tool_choice={"type": "any"}), "tool_choice"),  # no tools to call
        (mbody(tool_choice={"type": "tool", "name": "f"}), "tool_choice"),
        (mbody(tools=MTOOLS, tool_choice={"type": "tool"}), "tool_choice.name"),
        (mbody(tools=MTOOLS, tool_choice={"type": "tool", "name": "nope"}), "tool_choice"),
        (mbody(tools=MTOOLS, tool_choice={"type": "any", "disable_parallel_tool_use": 1}),
         "disable_parallel_tool_use"),
        (mbody(thinking={"type": "maybe"}), "thinking"),
        (mbody(stop_sequences="x"), "stop_sequences"),
        (mbody(temperature=-1), "temperature"),
        (mbody(system=5), "system"),
    ]
    for body, word in cases:
        st, _, o = post_json(d.port, MSG, body, AUTH)
        C.ok(anthropic_error(st, o, 400, "invalid_request_error") and
             word in o["error"]["message"], "%s -> 400 (%s)" % (json.dumps(body)[:70], word), o)
    st, _, raw = request(d.port, "POST", MSG, b"{\"model\": ", AUTH)
    C.ok(anthropic_error(st, json.loads(raw), 400, "invalid_request_error"), "truncated JSON", raw)
    st, _, raw = request(d.port, "POST", MSG, b"x" * (MAX_BODY + 1), AUTH)
    C.ok(anthropic_error(st, json.loads(raw), 413, "request_too_large"), "over max_body", raw)
    st, _, raw = request(d.port, "POST", MSG, b"{}", {"x-api-key": "wrong"})
    C.ok(anthropic_error(st, json.loads(raw), 401, "authentication_error"), "wrong x-api-key", raw)
    st, _, raw = request(d.port, "GET", MSG, None, AUTH)
    C.ok(anthropic_error(st, json.loads(raw), 405, "invalid_request_error"), "GET -> 405", raw)
    st, _, o = post_json(d.port, MSG + "/count_tokens", {"model": "m"}, AUTH)
    C.ok(anthropic_error(st, o, 400, "invalid_request_error"), "count_tokens without messages", o)


def check_eviction():
    """responses_store_max 2: the oldest of three is evicted (404), the newer two remain."""
    d = Daemon(B, MODEL, ["--slots", "1", "--ctx", "512", "--responses-store-max", "2"],
               name="fronts_http_evict").start()
    ids = [post_json(d.port, RESP, {"input": "x", "max_output_tokens": 1})[2]["id"]
           for _ in range(3)]
    got = [request(d.port, "GET", RESP + "/" + i)[0] for i in ids]
    C.ok(got == [404, 200, 200], "oldest evicted first", got)
    C.ok(d.stop() == 0, "clean exit (eviction daemon)")


def check_conversation_cache():
    """previous_response_id continues a conversation in the slot that holds it: the second
    turn's prompt starts with the first turn's prompt and answer, and the prompt cache serves
    that prefix (tiny qwen3: attention only, so any prefix is reusable)."""
    d = Daemon(B, B + "/models/tiny-qwen3.gguf", ["--slots", "1", "--ctx", "2048"],
               name="fronts_http_cache").start()
    sys_text = "You are the assistant of the conversation cache test; answer in a few words."
    st, _, r1 = post_json(d.port, RESP, {"input": "first turn", "instructions": sys_text,
                                         "max_output_tokens": 8, "temperature": 0})
    C.ok(st == 200 and r1 and r1.get("id"), "conversation turn 1", (st, r1))
    st, _, r2 = post_json(d.port, RESP, {"input": "second turn", "instructions": sys_text,
                                         "previous_response_id": (r1 or {}).get("id"),
                                         "max_output_tokens": 8, "temperature": 0})
    u1, u2 = (r1 or {}).get("usage", {}), (r2 or {}).get("usage", {})
    cached = (u2.get("input_tokens_details") or {}).get("cached_tokens", 0)
    C.ok(st == 200 and cached >= u1.get("input_tokens", 1 << 30),
         "turn 2 via previous_response_id reuses turn 1's prompt from the cache",
         (st, u1, u2))
    C.ok(d.stop() == 0, "clean exit (cache daemon)")


def main():
    d = Daemon(B, MODEL, ["--slots", "2", "--ctx", "2048", "--api-key", KEY, "--max-body",
                          str(MAX_BODY)], name="fronts_http").start()
    _, _, t = post_json(d.port, "/tokenize", {"content": "<|endoftext|><|im_end|>"}, AUTH)
    bias = {str(i): -100 for i in (t or {}).get("tokens", [])}
    first = check_responses_object(d, bias)
    check_responses_stream(d, bias)
    check_responses_store(d, first)
    check_cancel(d, bias)
    check_responses_errors(d)
    check_messages_object(d, bias)
    check_messages_stream(d, bias)
    check_messages_errors(d)
    if jsonschema:
        check_responses_structured(d)
        check_messages_tool_choice(d)
    else:
        print("note: python3-jsonschema missing: the structured-output checks are skipped")
    st, _, _ = request(d.port, "GET", "/health")
    C.ok(st == 200, "the daemon still serves")
    st, _, body = request(d.port, "GET", "/metrics", None, AUTH)
    C.ok(b'endpoint="/v1/responses"' in body and b'endpoint="/v1/messages"' in body,
         "metrics label both endpoints")
    C.ok(d.stop() == 0, "clean exit after SIGTERM")
    check_eviction()
    check_conversation_cache()
    return C.finish()


if __name__ == "__main__":
    run_main(main, C)
