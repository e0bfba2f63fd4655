#!/usr/bin/python3
"""make_corpus.py — writes the committed seed corpora of the fuzz targets that take text input
(tests/fuzz/corpus/{api,tok,cfg}/) and the JSON dictionary tests/fuzz/api.dict. Files named
issueN-* in a corpus are reproducers of crashes the fuzzers found (fixed in issue N); they are
kept as regression seeds. Re-run after
changing the cases; the GGUF seeds come from gguf_seeds.c and the Jinja seeds are the real chat
templates (tests/fuzz/run.sh). Seeds are small so the fuzzers mutate them quickly.

Usage: tests/fuzz/make_corpus.py   (from anywhere; python3 standard library only)
"""
import hashlib
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
USER = [{"role": "user", "content": "Hello there"}]
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "d",
          "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]
CALL = {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}

CHAT = [
    {"messages": USER},
    {"messages": [{"role": "system", "content": "Be brief."}] + USER, "max_tokens": 8,
     "temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": 42, "n": 2,
     "presence_penalty": 0.5, "frequency_penalty": -0.5, "repeat_penalty": 1.1,
     "stop": ["\n\n", "END"], "logit_bias": {"5": -100, "17": 3.5}, "user": "u", "model": "m"},
    {"messages": USER, "stream": True, "stream_options": {"include_usage": True},
     "logprobs": True, "top_logprobs": 3, "max_completion_tokens": 4},
    {"messages": USER + [CALL, {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
     "tools": TOOLS, "tool_choice": "auto", "parallel_tool_calls": False},
    {"messages": [{"role": "user", "content": [{"type": "text", "text": "part one"},
                                                {"type": "text", "text": " <|im_end|> two"}]}],
     "response_format": {"type": "text"}, "chat_template_kwargs": {"enable_thinking": False},
     "reasoning_effort": "low", "speculative": "ngram,mtp", "cache_prompt": False},
    {"messages": [{"role": "user", "content": "h\u00e9llo \u4e16\u754c \U0001F600 \\u0000"},
                  {"role": "assistant", "content": "<think>\nx\n</think>ok",
                   "reasoning_content": "x"}, {"role": "user", "content": "again"}]},
    {"messages": USER, "temperature": 1e999, "max_tokens": 1e15, "n": 0, "stop": ""},
    {"messages": USER, "max_tokens": 10 ** 12, "store": True, "metadata": {"a": [1, {"b": None}]}},
    {"messages": USER, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
     "tools": TOOLS},
    {"messages": USER, "response_format": {"type": "json_schema", "json_schema": {}}},
]
COMPL = [
    {"prompt": "Once upon a time", "max_tokens": 4, "echo": True, "logprobs": 2},
    {"prompt": ["one", "two", "<|endoftext|>three"], "n": 2, "suffix": "", "best_of": 1},
    {"prompt": [1, 2, 3, 4, 5], "stream": True, "seed": -1},
    {"prompt": [[1, 2], [3, 4, 200]], "stop": "x"},
    {"prompt": "x" * 300, "max_tokens": 1},
    {"prompt": [999999]},
]
TOK = [{"content": "Hello <|im_start|> world", "add_special": True, "with_pieces": True},
       {"content": "\u00e9\u4e16\U0001F600", "parse_special": False}]
DETOK = [{"tokens": [1, 2, 3, 200, 250]}, {"tokens": []}, {"tokens": [1.5, -1]}]
RAW = [b"", b"{", b'{"messages": []} x', b"[1,2]", b'{"messages":[{"role":"user","content":"\xff"}]}',
       b'{"messages":[{"role":"user","content":"a\x00b"}]}', b"[" * 70 + b"]" * 70,
       b'{"messages":[{"role":"user","content":"a"}],"messages":5}', b"\xef\xbb\xbf{}"]

CFG = [
    b"# deltad\nhost = 127.0.0.1\nport = 8080\nmodel = /m/x.gguf\nslots = 4\nctx = 4096\n",
    b"model = a.gguf\nmax_body = 8M\nidle_timeout = 30\nlog_level = debug\nlog_format = syslog\n"
    b"api_key = s3cret\ncors_origin = https://app.example.com\nmetrics = false\n",
    b"model=\"/path with space/m.gguf\"\ndevices = cpu:2\nspec_type = ngram\nspec_draft_max = 4\n"
    b"spec_p_min = 0.25\nrequest_timeout = 1.5\ndrain_timeout = 0\nqueue_full_status = 503\n",
    b"model = m.gguf\nslots = 0\n", b"model = m.gguf\nport = http\n", b"nonsense line\n",
    b"model = m.gguf\nunknown_key = 1\n", b"model = m.gguf\nmax_batch_tokens = 1\nslots = 8\n",
    b"model = m.gguf\r\nthreads = 1G\r\n",
]
ARGS = [b"--model\nm.gguf\n--port\n0\n--slots\n2", b"--model=m.gguf\n--host\n::1\n--ctx\n99999999999",
        b"--model\nm.gguf\n--api-key-file\n/nonexistent", b"--bogus\n1", b"--model"]


def write(dirname, name_data):
    d = os.path.join(HERE, "corpus", dirname)
    os.makedirs(d, exist_ok=True)
    for f in os.listdir(d):  # regressions (issueN-*) are kept: they came from real crashes
        if not f.startswith("issue"):
            os.remove(os.path.join(d, f))
    for data in name_data:
        name = hashlib.sha1(data).hexdigest()[:16]
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)


def main():
    api = []
    # byte 0: route (bits 0-1), context size (2-3), nesting limit (4), default max_tokens (5)
    for sel, objs in ((0x04, CHAT), (0x3C, CHAT), (0x09, COMPL), (0x0D, COMPL), (0x0E, TOK),
                      (0x0F, DETOK)):
        api += [bytes([sel]) + json.dumps(o).encode() for o in objs]
    api += [bytes([0x08]) + r for r in RAW]
    api += [bytes([0x0B]) + json.dumps(o, ensure_ascii=False).encode() for o in DETOK]
    write("api", api)
    texts = ["Hello world", "  leading spaces\tand\ttabs\r\n", "I'm 123 4567 it's", "\u00e9t\u00e9",
             "\u4e16\u754c\u4f60\u597d", "\U0001F600\U0001F44D", "<|im_start|>user\nhi<|im_end|>",
             "<think></think><tool_call>", "a\u0301 \u0915\u094d\u0937", "x" * 200]
    tok = [bytes([f]) + t.encode() for t in texts for f in (0, 1, 2, 3)]
    tok += [bytes([0x80]) + b"\xff\xfe\xc3(\xed\xa0\x80\xf4\x90\x80\x80"]
    tok += [bytes([5]) + b"".join(i.to_bytes(4, "little", signed=True)
                                  for i in (0, 1, 255, 256, 270, -1, 1 << 30, 151643, 151645))]
    write("tok", tok)
    write("cfg", [b"\x00" + c for c in CFG] + [b"\x01" + a for a in ARGS])
    keys = set()
    for o in CHAT + COMPL + TOK + DETOK:
        stack = [o]
        while stack:
            v = stack.pop()
            if isinstance(v, dict):
                keys.update(v.keys())
                stack += list(v.values())
            elif isinstance(v, list):
                stack += v
    with open(os.path.join(HERE, "api.dict"), "w") as f:
        f.write("# JSON keys and tokens of OpenAI requests (generated by make_corpus.py)\n")
        for k in sorted(keys) + ["user", "assistant", "system", "tool", "function", "text",
                                 "null", "true", "false", "<|im_start|>", "<|im_end|>"]:
            f.write('"%s"\n' % json.dumps(k).replace("\\", "\\\\").replace('"', '\\"'))


if __name__ == "__main__":
    main()
