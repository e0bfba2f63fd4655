"""structured.py BUILD_DIR — structured outputs end to end (issue 31): every schema of
tests/fixtures/schemas is requested from the demo model (models/demo.gguf) and the random tiny
model at temperature 0 and 1, through response_format json_schema (chat), the top-level
json_schema (completions) and response_format json_object; every answer that ended by itself
(finish_reason "stop") must parse and validate with python3-jsonschema (formats checked where
the checker can), and an answer cut by max_tokens must say finish_reason "length". Then GBNF
grammars, streaming, a cut answer, and the 400s of bad schemas and grammars (param, line and
column). Python standard library + python3-jsonschema.
"""

import concurrent.futures
import glob
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Daemon, post_json, run_main, stream, tiny_model  # noqa: E402

import jsonschema  # noqa: E402

B = sys.argv[1]
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCHEMAS = sorted(glob.glob(os.path.join(ROOT, "tests", "fixtures", "schemas", "*.json")))
DEMO = os.path.join(ROOT, "models", "demo.gguf")
TEMPLATES = os.path.join(ROOT, "..", "shared", "data", "templates")
C = Checks("test_structured")
NO_THINK = {"enable_thinking": False}


def validator(schema):
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def ask(port, name, schema, temp, how):
    """One constrained request; returns (finish_reason, text) or (None, error)."""
    common = {"max_tokens": 400, "temperature": temp, "seed": 11}
    if how == "chat":
        body = dict(common, messages=[{"role": "user", "content": "Answer in JSON: " + name}],
                    chat_template_kwargs=NO_THINK,
                    response_format={"type": "json_schema",
                                     "json_schema": {"name": name[:40], "schema": schema,
                                                     "strict": True}})
        st, _, o = post_json(port, "/v1/chat/completions", body, timeout=300)
        if st != 200 or not o:
            return None, "%s %s" % (st, o)
        ch = o["choices"][0]
        return ch["finish_reason"], ch["message"].get("content") or ""
    body = dict(common, prompt="JSON for %s:\n" % name, json_schema=schema)
    st, _, o = post_json(port, "/v1/completions", body, timeout=300)
    if st != 200 or not o:
        return None, "%s %s" % (st, o)
    return o["choices"][0]["finish_reason"], o["choices"][0]["text"]


def corpus(port, label):
    jobs = []
    for i, path in enumerate(SCHEMAS):
        with open(path) as f:
            schema = json.load(f)
        name = os.path.basename(path)[:-5]
        for temp in (0, 1):
            jobs.append((name, schema, temp, "chat" if (i + temp) % 3 else "completions"))
    valid = cut = 0
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        futs = [ex.submit(ask, port, n, s, t, h) for n, s, t, h in jobs]
        for (name, schema, temp, how), fut in zip(jobs, futs):
            finish, text = fut.result()
            what = "%s %s temp %d via %s" % (label, name, temp, how)
            if not C.ok(finish in ("stop", "length"), what + ": answered", text):
                continue
            if finish == "length":
                cut += 1
                continue
            try:
                doc = json.loads(text)
                validator(schema).validate(doc)
                valid += 1
                C.ok(True, what)
            except (ValueError, jsonschema.ValidationError) as ex:
                C.ok(False, what + ": invalid output", "%s -- %r" % (ex, text[:300]))
    print("%s: %d of %d answers validated, %d cut by max_tokens" % (label, valid, len(jobs), cut))
    return valid, cut, len(jobs)


def json_object_and_grammar(port, label):
    for temp in (0, 1):
        st, _, o = post_json(port, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "max_tokens": 300,
            "temperature": temp, "chat_template_kwargs": NO_THINK,
            "response_format": {"type": "json_object"}})
        ch = o["choices"][0] if st == 200 else {}
        if ch.get("finish_reason") == "stop":
            try:
                C.ok(isinstance(json.loads(ch["message"]["content"]), dict),
                     label + " json_object is an object")
            except ValueError as ex:
                C.ok(False, label + " json_object parses", ex)
        else:
            C.ok(st == 200 and ch.get("finish_reason") == "length", label + " json_object", o)
    g = 'root ::= "id-" [0-9]{2,4} ( " " word ){1,3}\nword ::= [a-z]+ | "x" [0-9]\n'
    st, _, o = post_json(port, "/v1/completions", {"prompt": "Tag:", "max_tokens": 60,
                                                   "temperature": 1, "seed": 3, "grammar": g})
    text = o["choices"][0]["text"] if st == 200 else ""
    fin = o["choices"][0]["finish_reason"] if st == 200 else None
    rx = r"id-[0-9]{2,4}( ([a-z]+|x[0-9])){1,3}"
    C.ok(fin == "stop" and re.fullmatch(rx, text) or fin == "length" and
         re.match(r"id-", text) is not None, label + " grammar output", (fin, text))
    # streaming: the deltas concatenate to a valid document
    schema = {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1,
                                                      "maximum": 9}},
              "required": ["n"], "additionalProperties": False}
    st, _, ev = stream(port, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "n?"}], "stream": True, "max_tokens": 200,
        "temperature": 0, "chat_template_kwargs": NO_THINK,
        "response_format": {"type": "json_schema", "json_schema": {"name": "n",
                                                                   "schema": schema}}})
    text, fin = "", None
    for _, p in ev:
        if p == "[DONE]":
            continue
        o = json.loads(p)
        for ch in o.get("choices", []):
            text += ch.get("delta", {}).get("content") or ""
            fin = ch.get("finish_reason") or fin
    if fin == "stop":
        try:
            validator(schema).validate(json.loads(text))
            C.ok(True, label + " streamed json_schema")
        except (ValueError, jsonschema.ValidationError) as ex:
            C.ok(False, label + " streamed json_schema", (ex, text))
    else:
        C.ok(st == 200 and fin == "length", label + " streamed json_schema finishes", ev[-3:])
    # a constrained answer cut by max_tokens says so
    st, _, o = post_json(port, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}], "max_tokens": 2, "temperature": 0,
        "chat_template_kwargs": NO_THINK,
        "json_schema": {"type": "object", "properties": {"long_property_name": {
            "type": "string", "minLength": 20}}, "required": ["long_property_name"]}})
    C.ok(st == 200 and o["choices"][0]["finish_reason"] == "length", label + " cut -> length", o)


WEATHER = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                           "days": {"type": "integer", "minimum": 1,
                                                    "maximum": 7}},
           "required": ["city"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "now", "strict": True,
                                           "parameters": {"type": "object", "properties": {},
                                                          "additionalProperties": False}}}]
# the XML form's kinds of values: raw strings (lengths, enum, pattern, format), JSON for the rest
XML_PARAMS = {"type": "object", "$defs": {"Unit": {"enum": ["C", "F", "<K>"]}},
              "properties": {
                  "city": {"type": "string", "maxLength": 12},
                  "unit": {"$ref": "#/$defs/Unit"},
                  "days": {"type": "integer", "minimum": 1, "maximum": 7},
                  "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{1,3}$"},
                  "when": {"type": "string", "format": "date"},
                  "tags": {"type": "array", "items": {"type": "string", "maxLength": 4},
                           "maxItems": 2},
                  "opt": {"type": ["string", "null"], "maxLength": 3},
                  "flag": {"type": "boolean"},
                  "where": {"type": "object", "properties": {"lat": {"type": "number"}},
                            "required": ["lat"], "additionalProperties": False}},
              "required": ["city", "days", "unit"], "additionalProperties": False}
XML_TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": XML_PARAMS}},
             TOOLS[1]]
SCHEMA_OF = {"get_weather": WEATHER, "now": TOOLS[1]["function"]["parameters"]}
XML_SCHEMA_OF = {"get_weather": XML_PARAMS, "now": TOOLS[1]["function"]["parameters"]}


def tool_choice(port, label, tools=TOOLS, schema_of=SCHEMA_OF):
    """required: at least one call; named: exactly that function; parallel false: one call;
    none: no call; auto with a strict tool: calls (if any) valid. Arguments validated."""
    cases = [("required", "required", True), ("named", {"type": "function",
                                                         "function": {"name": "now"}}, False),
             ("none", "none", True), ("auto+strict", "auto", True)]
    for temp in (0, 1):
        for what, tc, parallel in cases:
            st, _, o = post_json(port, "/v1/chat/completions", {
                "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                "tools": tools, "tool_choice": tc, "parallel_tool_calls": parallel,
                "max_tokens": 300, "temperature": temp, "seed": 5,
                "chat_template_kwargs": NO_THINK})
            tag = "%s tool_choice %s temp %d" % (label, what, temp)
            if not C.ok(st == 200, tag + ": 200", o):
                continue
            ch = o["choices"][0]
            calls = ch["message"].get("tool_calls") or []
            if ch["finish_reason"] == "length":
                C.ok(what in ("auto+strict", "none") or calls, tag + ": cut, with a call begun",
                     ch)
                continue
            if what == "none":
                C.ok(not calls, tag + ": no call", ch)
                continue
            if what != "auto+strict":
                C.ok(ch["finish_reason"] == "tool_calls" and calls, tag + ": a call", ch)
            if what == "named":
                C.ok(len(calls) == 1 and calls[0]["function"]["name"] == "now",
                     tag + ": exactly the named function", calls)
            for c in calls:
                name = c["function"]["name"]
                try:
                    validator(schema_of[name]).validate(json.loads(c["function"]["arguments"]))
                    C.ok(True, tag + ": arguments valid")
                except (KeyError, ValueError, jsonschema.ValidationError) as ex:
                    C.ok(False, tag + ": arguments valid", (ex, c))
    st, _, o = post_json(port, "/v1/chat/completions", {
        "messages": [{"role": "user", "content": "x"}], "tools": tools,
        "tool_choice": "required", "parallel_tool_calls": False, "max_tokens": 300,
        "temperature": 1, "seed": 9, "chat_template_kwargs": NO_THINK})
    calls = (o["choices"][0]["message"].get("tool_calls") or []) if st == 200 else None
    C.ok(calls is not None and len(calls) == 1, label + " parallel_tool_calls false: one call", o)


def xml_calls(port, label):
    """The XML form at temperature 1 over several seeds, get_weather named: every finished
    call's arguments (read back from raw strings and JSON values) valid; most calls finish."""
    done = 0
    for seed in range(8):
        st, _, o = post_json(port, "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "Weather?"}], "tools": XML_TOOLS,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
            "max_tokens": 400, "temperature": 1, "seed": 100 + seed,
            "chat_template_kwargs": NO_THINK}, timeout=300)
        tag = "%s XML named call seed %d" % (label, seed)
        if not C.ok(st == 200, tag + ": 200", o):
            continue
        ch = o["choices"][0]
        calls = ch["message"].get("tool_calls") or []
        if ch["finish_reason"] == "length":
            continue
        done += 1
        C.ok(len(calls) == 1 and calls[0]["function"]["name"] == "get_weather",
             tag + ": one call of get_weather", ch)
        for c in calls:
            try:
                validator(XML_PARAMS).validate(json.loads(c["function"]["arguments"]))
                C.ok(True, tag + ": arguments valid")
            except (ValueError, jsonschema.ValidationError) as ex:
                C.ok(False, tag + ": arguments valid", (ex, c))
    C.ok(done >= 4, label + " XML named calls: most finish", "%d of 8" % done)


def bad_inputs(port):
    user = [{"role": "user", "content": "x"}]
    cases = [
        ({"json_schema": 5}, "json_schema", "must be a JSON Schema"),
        ({"json_schema": {"type": 123}}, "json_schema", "'type'"),
        ({"json_schema": {"type": "hiccup"}}, "json_schema", "unknown type 'hiccup'"),
        ({"json_schema": {"$ref": "#/$defs/nope"}}, "json_schema", "does not resolve"),
        ({"json_schema": {"type": "string", "pattern": "(?=a)b"}}, "json_schema", "lookarounds"),
        ({"json_schema": {"type": "string", "pattern": "a\\1"}}, "json_schema", "'\\1'"),
        ({"json_schema": {"type": "number", "minimum": 0.5}}, "json_schema", "'number'"),
        ({"json_schema": {"type": "array", "uniqueItems": True}}, "json_schema", "uniqueItems"),
        ({"json_schema": {"oneOf": [{"type": "integer"}, {"type": "number"}]}}, "json_schema",
         "'oneOf' branches 0 and 1 may both match one value"),
        ({"response_format": {"type": "json_schema", "json_schema": {"schema": False}}},
         "response_format.json_schema.schema", "matches nothing"),
        ({"response_format": {"type": "json_schema"}}, "response_format.json_schema", ""),
        ({"grammar": "root ::= \"a\"\n  x ::= [a-\n"}, "grammar", "line 2, column"),
        ({"grammar": "root ::= foo"}, "grammar", "line 1, column 10: undefined rule 'foo'"),
        ({"grammar": "root ::= root \"a\" | \"b\""}, "grammar", "left-recursive"),
        ({"grammar": "root ::= \"a\"", "json_schema": {}}, "grammar", "only one"),
    ]
    for extra, param, text in cases:
        for path, body in (("/v1/chat/completions", {"messages": user}),
                           ("/v1/completions", {"prompt": "x"})):
            if "response_format" in extra and path == "/v1/completions":
                pass
            body = dict(body, **extra)
            st, _, o = post_json(port, path, body)
            err = (o or {}).get("error", {})
            C.ok(st == 400 and err.get("param") == param and text in err.get("message", ""),
                 "bad input %s on %s -> 400 %s" % (json.dumps(extra)[:80], path, param),
                 (st, o))
    deep = {"$defs": {"a%d" % i: {"$ref": "#/$defs/a%d" % (i + 1)} for i in range(40)}}
    deep["$defs"]["a40"] = {"type": "integer"}
    deep["$ref"] = "#/$defs/a0"
    st, _, o = post_json(port, "/v1/chat/completions", {"messages": user, "json_schema": deep})
    C.ok(st == 400 and "deeper than 32" in o["error"]["message"], "too deep -> 400", o)


def xml_form():
    """Forced calls in the XML form of the Qwen3.5 and Qwen3-Coder templates (the tiny model with
    one, the demo model with the other)."""
    for model, tmpl, label in ((tiny_model(B), "Qwen3.5-4B", "tiny-qwen35"),
                               (DEMO, "Qwen3-Coder", "demo")):
        path = os.path.join(TEMPLATES, tmpl + ".jinja")
        if not os.path.exists(model) or not os.path.exists(path):
            print("note: %s or %s missing; the XML form with it is not checked" % (model, path))
            continue
        d = Daemon(B, model, ["--slots", "4", "--ctx", "4096", "--chat-template-file", path],
                   name="structured_xml_" + label)
        d.start()
        try:
            tool_choice(d.port, label + " " + tmpl, XML_TOOLS, XML_SCHEMA_OF)
            xml_calls(d.port, label + " " + tmpl)
        finally:
            C.ok(d.stop() == 0, label + " " + tmpl + " daemon exits cleanly after SIGTERM")


def main():
    if not os.path.exists(DEMO):
        print("note: %s missing; only the tiny model is checked" % DEMO)
    for model, label in ((DEMO, "demo"), (tiny_model(B), "tiny-qwen35")):
        if not os.path.exists(model):
            continue
        d = Daemon(B, model, ["--slots", "4", "--ctx", "2048"], name="structured_" + label)
        d.start()
        try:
            valid, cut, n = corpus(d.port, label)
            C.ok(valid >= n // 4, "%s: at least a quarter of the answers end by themselves" % label,
                 "%d of %d" % (valid, n))
            json_object_and_grammar(d.port, label)
            tool_choice(d.port, label)
            if label == "demo" or not os.path.exists(DEMO):
                bad_inputs(d.port)
        finally:
            C.ok(d.stop() == 0, label + " daemon exits cleanly after SIGTERM")
    xml_form()
    return C.finish()


run_main(main, C)
