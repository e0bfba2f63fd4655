#!/usr/bin/python3
"""make_fixtures.py — expected chat-template renders for tests/unit/test_jinja.c.

Usage (from the repository root, Debian's Python with python3-jinja2):

    /usr/bin/python3 tools/templates/make_fixtures.py [TEMPLATE_DIR] [OUT_DIR]

TEMPLATE_DIR defaults to ../shared/data/templates, OUT_DIR to tests/fixtures/templates.

Python jinja2 is configured the way Hugging Face transformers' `_compile_jinja_template` does it:
an ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols extension and
the {% generation %} tag (rendered as its body),
the globals raise_exception (raises TemplateError with the message) and strftime_now, and a
`tojson` filter overridden by json.dumps(x, ensure_ascii=False, indent=indent,
separators=separators, sort_keys=sort_keys) — so the default separators are ", " and ": " and
non-ASCII text is written as is. The render call passes what `render_jinja_template` passes:
messages, tools (None when the request has none), documents=None, add_generation_prompt, plus
the case's extra keyword arguments (enable_thinking only when the case sets it).

Outputs:
  cases.json                 [{name, messages, tools, add_generation_prompt, kwargs}, ...]
  <template>__<case>.txt     the rendered prompt, byte for byte (UTF-8), when Python succeeds
  <template>__<case>.err     when Python raises: "raise: MSG" for raise_exception(MSG),
                             otherwise "error: ExceptionType: message" (the C side only checks
                             that it fails too)
  snippets.json              [{name, template, expected | error}] small templates rendered
                             against SNIPPET_CTX (also stored in the file as "context")
"""

import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_NOW = datetime.datetime(2025, 3, 7, 9, 5, 2)  # what the C test injects (local time)


class RaisedError(Exception):
    pass


class GenerationTag(jinja2.ext.Extension):
    """{% generation %}...{% endgeneration %} renders its body, like transformers'
    AssistantTracker when no assistant mask is requested."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        call = self.call_method("_body")
        return jinja2.nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def make_env():
    def raise_exception(message):
        raise RaisedError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return FIXED_NOW.strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols, GenerationTag])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


# ---- conversations ------------------------------------------------------------------------

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.\n",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "City name, e.g. Zürich"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"],
                             "description": "Temperature unit"},
                },
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web \"quickly\".",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "max_results": {"type": ["integer", "null"], "minimum": 1, "default": 5},
                    "filters": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["query"],
            },
        },
    },
]

SYS = {"role": "system", "content": "You are a helpful assistant."}
USER = {"role": "user", "content": "What is the weather in Paris?"}


def call(name, args, cid="call_1", as_string=False):
    return {"id": cid, "type": "function",
            "function": {"name": name,
                         "arguments": json.dumps(args, ensure_ascii=False) if as_string else args}}


def tool_turn(as_string):
    args = {"city": "Paris", "unit": "celsius"}
    return [
        SYS, USER,
        {"role": "assistant", "content": "", "tool_calls": [call("get_weather", args,
                                                                 as_string=as_string)]},
        {"role": "tool", "tool_call_id": "call_1", "content": "{\"temp\": 21, \"sky\": \"clear\"}"},
    ]


def case(name, messages, tools=None, agp=True, **kwargs):
    return {"name": name, "messages": messages, "tools": tools, "add_generation_prompt": agp,
            "kwargs": kwargs}


CASES = [
    case("basic", [SYS, USER]),
    case("basic_nogen", [SYS, USER], agp=False),
    case("user_only", [USER]),
    case("multi_turn", [SYS, {"role": "user", "content": "Hi!"},
                        {"role": "assistant", "content": "Hello! How can I help?"}, USER]),
    case("multi_turn_nogen", [{"role": "user", "content": "Hi!"},
                              {"role": "assistant", "content": "Hello! How can I help?"}],
         agp=False),
    case("think_off", [SYS, USER], enable_thinking=False),
    case("think_on", [SYS, USER], enable_thinking=True),
    case("think_off_nogen", [USER], agp=False, enable_thinking=False),
    case("reasoning_field", [
        USER,
        {"role": "assistant", "content": "It is sunny.", "reasoning_content": "Check weather."},
        {"role": "user", "content": "And tomorrow?"},
        {"role": "assistant", "content": "Rain.", "reasoning_content": "\nForecast says rain.\n"},
    ], agp=False),
    case("reasoning_none", [
        USER, {"role": "assistant", "content": "Sunny.", "reasoning_content": None}], agp=False),
    case("think_inline", [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nsimple sum\n</think>\n\n4"},
        {"role": "user", "content": "3+3?"},
        {"role": "assistant", "content": "<think>\nagain\n</think>\n\n6"},
    ], agp=False),
    case("think_inline_history", [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nsimple sum\n</think>\n\n4"},
        {"role": "user", "content": "3+3?"},
    ]),
    case("tools", [SYS, USER], tools=TOOLS),
    case("tools_nosys", [USER], tools=TOOLS),
    case("tools_think_off", [USER], tools=TOOLS, enable_thinking=False),
    case("tool_call_dict", tool_turn(False), tools=TOOLS),
    case("tool_call_str", tool_turn(True), tools=TOOLS),
    case("tool_call_content_null", [
        USER,
        {"role": "assistant", "content": None,
         "tool_calls": [call("get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21C"},
    ], tools=TOOLS),
    case("tool_call_with_text", [
        USER,
        {"role": "assistant", "content": "Let me check.\n",
         "tool_calls": [call("get_weather", {"city": "Paris"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "21C"},
    ], tools=TOOLS),
    case("parallel_calls", [
        SYS, {"role": "user", "content": "Weather in Paris and Rome, and search news."},
        {"role": "assistant", "content": "", "tool_calls": [
            call("get_weather", {"city": "Paris"}, "c1"),
            call("get_weather", {"city": "Rome", "unit": "fahrenheit"}, "c2"),
            call("search", {"query": "news", "max_results": 3, "filters": ["today", "eu"],
                            "strict": True, "score": 0.25, "extra": None,
                            "nested": {"a": [1, 2], "b": "x"}}, "c3"),
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "Paris: 21C"},
        {"role": "tool", "tool_call_id": "c2", "content": "Rome: 75F"},
        {"role": "tool", "tool_call_id": "c3", "content": "[]"},
        {"role": "assistant", "content": "Paris is 21C, Rome 75F; no news."},
        {"role": "user", "content": "Thanks"},
    ], tools=TOOLS),
    case("multi_step_tools", [
        {"role": "user", "content": "Plan a trip."},
        {"role": "assistant", "content": "", "reasoning_content": "Need weather first.",
         "tool_calls": [call("get_weather", {"city": "Oslo"})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "-3C"},
        {"role": "assistant", "content": "", "reasoning_content": "Now search.",
         "tool_calls": [call("search", {"query": "Oslo hotels"}, "call_2")]},
        {"role": "tool", "tool_call_id": "call_2", "content": "Hotel A"},
    ], tools=TOOLS),
    case("tool_response_user", [
        {"role": "user", "content": "Hello"},
        {"role": "assistant", "content": "Hi"},
        {"role": "user", "content": "<tool_response>\nfake\n</tool_response>"},
    ]),
    case("unicode", [
        {"role": "system", "content": "Réponds en français. 日本語も OK 😀"},
        {"role": "user", "content": "Ça va ? \"quotes\" \\ back\\slash\ttab"},
    ], tools=[{"type": "function", "function": {
        "name": "traduire", "description": "Traduit «texte» → 中文 \u0001\u001f\u007f",
        "parameters": {"type": "object", "properties": {"texte": {"type": "string"}}}}}]),
    case("unicode_args", [
        USER,
        {"role": "assistant", "content": "", "tool_calls": [
            call("search", {"query": "naïve \"café\"\n\\n", "max_results": 1.5,
                            "filters": [], "flag": False})]},
        {"role": "tool", "tool_call_id": "call_1", "content": "ok"},
    ], tools=TOOLS),
    case("multimodal", [
        {"role": "user", "content": [{"type": "text", "text": "Describe "},
                                     {"type": "image", "image": "x.png"},
                                     {"type": "text", "text": " this."}]},
    ]),
    case("system_late", [USER, SYS]),
    case("no_messages", []),
    case("assistant_last", [USER, {"role": "assistant", "content": "Partial answ"}], agp=False),
    case("empty_tools", [SYS, USER], tools=[]),
]


# ---- snippets -----------------------------------------------------------------------------

SNIPPET_CTX = {
    "d": {"a": 1, "b": [1, 2], "items": "key", "name": "dee"},
    "l": [3, 1, 2],
    "s": "héllo Wörld",
    "n": None,
    "i": 7,
    "f": 2.5,
    "t": True,
    "e": [],
    "users": [{"name": "ann", "age": 31, "admin": True},
              {"name": "bob", "age": 25, "admin": False},
              {"name": "cid", "age": 40}],
    "msg": "  padded\n",
}

SNIPPETS = [
    # literals and printing
    ("lit_int", "{{ 42 }} {{ -3 }} {{ 1_000 }} {{ 0x1f }} {{ 0o17 }} {{ 0b101 }}"),
    ("lit_float", "{{ 1.5 }} {{ 2e3 }} {{ 1.0 }} {{ 1e16 }} {{ 1e-5 }} {{ 0.1 + 0.2 }} {{ 1/3 }}"),
    ("lit_float2", "{{ 123456789.125 }} {{ 1e15 }} {{ 0.0001 }} {{ -0.0 }} {{ 2.5e-10 }} {{ 1e300*10 }}"),
    ("lit_str", "{{ 'a\\nb' }}|{{ \"q'\" }}|{{ 'x' 'y' }}|{{ '\\u00e9\\x41\\t' }}|{{ '\\d' }}"),
    ("lit_bool", "{{ true }} {{ False }} {{ none }} {{ None }}"),
    ("lit_list", "{{ [1, 'a', none, true, 1.5, [], {}] }}"),
    ("lit_tuple", "{{ (1, 2) }} {{ (1,) }} {{ () }} {{ 1, 2 }}"),
    ("lit_dict", "{{ {'a': 1, 'b': {'c': [1, 'x']}} }} {{ {1: 2} }}"),
    ("repr_str", "{{ [\"it's\", 'say \"hi\"', 'both \\' \"', 'nl\\n', 'é'] }}"),
    # arithmetic
    ("arith", "{{ 7 + 2 }} {{ 7 - 9 }} {{ 7 * 3 }} {{ 7 / 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }}"),
    ("arith2", "{{ 2 ** 10 }} {{ 2 ** -1 }} {{ 7.5 // 2 }} {{ 7.5 % 2 }} {{ 1 + 2.5 }} {{ true + 1 }} {{ 10 / 5 }}"),
    ("arith_str", "{{ 'ab' * 3 }} {{ 'ab' + 'cd' }} {{ [1] * 2 }} {{ [1] + [2] }} {{ 2 * 'x' }}"),
    ("arith_prec", "{{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }} {{ -2 ** 2 }} {{ 2 ** 3 ** 2 }} {{ 10 - 2 - 3 }}"),
    ("concat", "{{ 'a' ~ 1 ~ none ~ true ~ 1.5 ~ [1] ~ n }}"),
    ("neg", "{{ -i }} {{ +i }} {{ -f }} {{ not i }} {{ not e }}"),
    # comparison and logic
    ("cmp", "{{ 1 < 2 }} {{ 2 <= 1 }} {{ 1 == 1.0 }} {{ 1 == true }} {{ 'a' != 'b' }} {{ 1 < 2 < 3 }} {{ 3 > 2 > 2 }}"),
    ("cmp_str", "{{ 'abc' < 'abd' }} {{ 'é' > 'z' }} {{ [1, 2] == [1, 2] }} {{ [1, 2] < [1, 3] }} {{ {'a': 1} == {'a': 1} }}"),
    ("in", "{{ 'a' in 'cat' }} {{ 2 in l }} {{ 'a' in d }} {{ 'z' not in d }} {{ 5 not in l }} {{ 'é' in s }}"),
    ("logic", "{{ 0 or 'x' }} {{ 1 and 'y' }} {{ '' and 1 }} {{ none or [] }} {{ e or d.a }} {{ not 0 and 1 }}"),
    ("ternary", "{{ 'y' if t else 'n' }} {{ 'y' if e else 'n' }} [{{ 'y' if e }}] {{ 1 if 0 else 2 if 0 else 3 }}"),
    # access
    ("getattr", "{{ d.a }} {{ d['b'][1] }} {{ d.b.0 }} [{{ d.zz }}] {{ users[1].name }} {{ d['items'] }}"),
    ("getattr_none", "[{{ n.x }}] {{ n.x is defined }} {{ i.x is defined }} {{ s.nope is defined }}"),
    ("index", "{{ l[0] }} {{ l[-1] }} [{{ l[5] }}] {{ s[1] }} {{ s[-1] }} {{ 'abc'[0] }}"),
    ("slice", "{{ l[1:] }} {{ l[:-1] }} {{ l[::-1] }} {{ l[::2] }} {{ l[5:] }} {{ l[-2:-1] }} {{ l[2:0:-1] }}"),
    ("slice_str", "{{ s[1:4] }} {{ s[::-1] }} {{ s[-5:] }} {{ 'abcdef'[1::2] }} {{ 'abc'[10:] }}|"),
    # tests
    ("tests_types", "{{ s is string }} {{ i is number }} {{ i is integer }} {{ f is float }} {{ d is mapping }} {{ l is sequence }} {{ d is sequence }} {{ s is iterable }} {{ i is iterable }} {{ t is boolean }} {{ 1 is boolean }}"),
    ("tests_defined", "{{ x is defined }} {{ x is undefined }} {{ d is defined }} {{ n is none }} {{ n is not none }} {{ d.zz is defined }} {{ x is iterable }}"),
    ("tests_tf", "{{ t is true }} {{ t is false }} {{ 1 is true }} {{ false is false }} {{ 0 is false }}"),
    ("tests_num", "{{ 3 is odd }} {{ 3 is even }} {{ 9 is divisibleby 3 }} {{ 9 is divisibleby(4) }} {{ 2 is in l }} {{ 1 is eq 1 }} {{ 1 is ne 2 }} {{ 2 is gt 1 }} {{ 2 is lt 1 }}"),
    ("tests_str", "{{ 'abc' is lower }} {{ 'ABC' is upper }} {{ range is callable }} {{ d is callable }} {{ n is sameas none }}"),
    # filters
    ("f_length", "{{ l|length }} {{ s|length }} {{ d|count }} {{ x|length }} {{ ''|length }}"),
    ("f_trim", "[{{ msg|trim }}] [{{ 'xxaxx'|trim('x') }}] [{{ n|trim }}] [{{ 5|trim }}]"),
    ("f_string", "{{ 5|string }} {{ t|string }} {{ n|string }} {{ l|string }} [{{ x|string }}] {{ 2.50|string }}"),
    ("f_default", "{{ x|default('dflt') }} {{ n|default('dflt') }} {{ ''|default('e', true) }} {{ 0|d('z', boolean=true) }} {{ i|default(3) }} {{ x|d }}|"),
    ("f_join", "{{ l|join }} {{ l|join(', ') }} {{ users|join('/', attribute='name') }} {{ 'abc'|join('-') }}"),
    ("f_case", "{{ s|upper }} {{ s|lower }} {{ 'hELLO wORLD'|capitalize }} {{ 'hello big-world (x) [y]'|title }}"),
    ("f_replace", "{{ 'aaa'|replace('a', 'b') }} {{ 'aaa'|replace('a', 'b', 2) }} {{ 'abc'|replace('', '-') }}"),
    ("f_first_last", "{{ l|first }} {{ l|last }} {{ s|first }} {{ s|last }} [{{ e|first }}] {{ d|first }}"),
    ("f_list", "{{ s|list }} {{ d|list }} {{ l|list }} {{ range(3)|list }}"),
    ("f_items", "{% for k, v in d|items %}{{ k }}={{ v }};{% endfor %} {{ d.items()|list }} [{{ x|items|list }}]"),
    ("f_safe", "{{ '<b>'|safe }} {{ 5|safe }} {{ l|safe }}"),
    ("f_int_float", "{{ '12'|int + 1 }} {{ '1.9'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ t|int }} {{ '0x1A'|int(0, 16) }} {{ '2.5'|float }} {{ 'q'|float }} {{ 3|float }}"),
    ("f_abs_round", "{{ -3|abs }} {{ (-2.5)|abs }} {{ 2.5|round }} {{ 3.5|round }} {{ 3.14159|round(2) }} {{ 3|round }} {{ 2.7|round(0, 'floor') }} {{ 2.1|round(0, 'ceil') }}"),
    ("f_map", "{{ users|map(attribute='name')|join(',') }} {{ users|map(attribute='age', default=0)|list }} {{ ['a', 'b']|map('upper')|list }} {{ users|map(attribute='admin')|list }}"),
    ("f_select", "{{ [1, 2, 3, 4]|select('odd')|list }} {{ [1, 2, 3, 4]|reject('odd')|list }} {{ [0, 1, '', 'x']|select|list }} {{ [1, 5, 9]|select('gt', 4)|list }}"),
    ("f_selectattr", "{{ users|selectattr('admin')|map(attribute='name')|list }} {{ users|rejectattr('admin')|map(attribute='name')|list }} {{ users|selectattr('age', 'gt', 30)|map(attribute='name')|join }} {{ users|selectattr('admin', 'defined')|list|length }}"),
    ("f_unique_sort", "{{ [3, 1, 3, 2]|unique|list }} {{ l|sort }} {{ l|sort(reverse=true) }} {{ ['b', 'A', 'a']|sort }} {{ ['b', 'A', 'a']|sort(case_sensitive=true) }} {{ users|sort(attribute='age')|map(attribute='name')|join }}"),
    ("f_indent", "{{ 'a\\nb\\n\\nc'|indent }}|{{ 'a\\nb'|indent(2, true) }}|{{ 'a\\n\\nb'|indent(2, blank=true) }}"),
    ("f_misc", "{{ l|sum }} {{ l|min }} {{ l|max }} {{ l|reverse|list }} {{ 'abc'|reverse }} {{ users|sum(attribute='age') }} {{ 'a<b>&\"'|e }}"),
    ("f_dictsort", "{{ {'b': 1, 'a': 2}|dictsort }} {{ {'b': 1, 'a': 2}|dictsort(by='value') }}"),
    ("f_tojson", "{{ d|tojson }} {{ l|tojson }} {{ s|tojson }} {{ n|tojson }} {{ t|tojson }} {{ f|tojson }} {{ 'a\"\\\\\\n\\t\\u0001\\u007f'|tojson }}"),
    ("f_tojson_indent", "{{ d|tojson(indent=2) }}\n{{ [1, [], {}, [2]]|tojson(indent=2) }}\n{{ {'z': 1, 'a': 2}|tojson(sort_keys=true) }}\n{{ 'é'|tojson(ensure_ascii=true) }}\n{{ {'a': [1, 2]}|tojson(separators=(',', ':')) }}"),
    ("f_tojson_keys", "{{ {1: 'a', none: 'b', true: 'c', 1.5: 'd'}|tojson }}"),
    ("f_chain", "{{ ' Hello '|trim|upper|replace('L', 'l')|length }} {{ -l|length if false else l|length }}"),
    # string methods
    ("m_startswith", "{{ s.startswith('hé') }} {{ s.endswith('rld') }} {{ s.startswith(('x', 'h')) }} {{ 'abc'.startswith('b', 1) }}"),
    ("m_split", "{{ 'a b  c '.split() }} {{ 'a,b,,c'.split(',') }} {{ 'a,b,c'.split(',', 1) }} {{ '  x  y'.split(none, 1) }} {{ ''.split() }} {{ ''.split(',') }} {{ 'a,b'.rsplit(',', 1) }}"),
    ("m_strip", "[{{ '  a  '.strip() }}] [{{ 'xxaxx'.lstrip('x') }}] [{{ 'xxaxx'.rstrip('x') }}] [{{ '\\n\\na\\n'.lstrip('\\n') }}] [{{ ' \\u3000a\\u00a0 '.strip() }}]"),
    ("m_case", "{{ s.upper() }} {{ 'Hello World'.lower() }} {{ 'hello wORLD-x 1a'.title() }} {{ 'hELLO'.capitalize() }} {{ 'aBc'.swapcase() }}"),
    ("m_find", "{{ 'hello'.find('l') }} {{ 'hello'.find('z') }} {{ 'hello'.rfind('l') }} {{ 'hello'.count('l') }} {{ 'hello'.index('e') }} {{ 'hello'.replace('l', 'L') }} {{ 'hello'.replace('l', 'L', 1) }}"),
    ("m_is", "{{ '123'.isdigit() }} {{ 'a1'.isalnum() }} {{ 'ab'.isalpha() }} {{ ' '.isspace() }} {{ 'ab'.islower() }} {{ 'AB'.isupper() }} {{ ''.isdigit() }}"),
    ("m_join_format", "{{ ', '.join(['a', 'b']) }} {{ '-'.join(l|map('string')) }} {{ 'x{}y{}'.format(1, 'z') }} {{ '{a}!'.format(a=2) }}"),
    ("m_misc_str", "{{ 'a\\nb\\r\\nc'.splitlines() }} {{ 'ab'.center(6, '*') }} {{ '7'.zfill(3) }} {{ 'Ab'.casefold() }}"),
    # dict and list methods
    ("m_dict", "{{ d.keys()|list }} {{ d.values()|list }} {{ d.get('a') }} {{ d.get('zz') }} {{ d.get('zz', 5) }} {% for k, v in d.items() %}{{ k }}{% endfor %}"),
    ("m_list", "{{ l.index(1) }} {{ l.count(3) }} {{ [1, 2, 1].count(1) }}"),
    # statements
    ("s_if", "{% if i > 5 %}big{% elif i > 2 %}mid{% else %}small{% endif %} {% if e %}x{% elif n %}y{% else %}z{% endif %}"),
    ("s_for_loop", "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }};{% endfor %}"),
    ("s_for_prev_next", "{% for x in l %}({{ loop.previtem }},{{ loop.nextitem }},{{ loop.previtem is defined }}){% endfor %}"),
    ("s_for_else", "{% for x in e %}x{% else %}empty{% endfor %} {% for x in l if x > 5 %}{{ x }}{% else %}none{% endfor %}"),
    ("s_for_filter", "{% for x in [1, 2, 3, 4, 5] if x is odd %}{{ x }}:{{ loop.index }}/{{ loop.length }}{{ '' if loop.last else ',' }}{% endfor %}"),
    ("s_for_dict", "{% for k in d %}{{ k }},{% endfor %} {% for k, v in d.items() %}{{ k }}:{{ v }},{% endfor %} {% for a, b in [[1, 2], (3, 4)] %}{{ a + b }}{% endfor %}"),
    ("s_for_str", "{% for c in 'hé!' %}[{{ c }}]{% endfor %}"),
    ("s_for_nested", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }} {% endfor %}|{{ loop.index }}{% endfor %}"),
    ("s_for_cycle", "{% for x in l %}{{ loop.cycle('odd', 'even') }} {% endfor %}{% for x in l %}{{ loop.depth }}{{ loop.depth0 }}{% endfor %}"),
    ("s_break_continue", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 5 %}{% break %}{% endif %}{{ x }}{% endfor %}"),
    ("s_set", "{% set a = 1 %}{% set b, c = 2, 3 %}{% set t2 = 4, 5 %}{{ a }}{{ b }}{{ c }}{{ t2 }}"),
    ("s_set_block", "{% set x %}  block {{ i }} {% endset %}[{{ x }}]{% set y | upper %}up{% endset %}{{ y }}"),
    ("s_scope_for", "{% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = x + 10 %}{{ x }};{% endfor %}{{ x }}"),
    ("s_scope_if", "{% if true %}{% set z = 4 %}{% endif %}{{ z }}"),
    ("s_namespace", "{% set ns = namespace(a=1, b=[]) %}{% for x in l %}{% set ns.a = ns.a + x %}{% set ns.b = ns.b + [x] %}{% endfor %}{{ ns.a }} {{ ns.b }} {{ ns.c is defined }} {{ ns }}"),
    ("s_namespace2", "{% set ns = namespace() %}{% set ns.found = false %}{% for u in users %}{% if u.admin is defined and not u.admin %}{% set ns.found = u.name %}{% endif %}{% endfor %}{{ ns.found }} {{ namespace(d) }}"),
    ("s_macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('a') }} {{ greet('b', '?') }} {{ greet(punct='.', name='c') }} [{{ greet() }}]"),
    ("s_macro_defaults", "{% macro m(a, b=a ~ '+', c=none) %}{{ a }}|{{ b }}|{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, 2, 3) }}"),
    ("s_macro_varargs", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, 3, k=4) }}"),
    ("s_macro_scope", "{% macro m() %}{{ top }}{{ i }}{% endmacro %}{% set top = 'T' %}{% for i in [9] %}{{ m() }}{% endfor %}"),
    ("s_macro_recursive", "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}"),
    ("s_macro_ns", "{% set c = namespace(v=0) %}{% macro inc() %}{% set c.v = c.v + 1 %}{% endmacro %}{{ inc() }}{{ inc() }}{{ c.v }}"),
    ("s_call", "{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}{% call wrap('b') %}inner {{ i }}{% endcall %}"),
    ("s_call_args", "{% macro each(xs) %}{% for x in xs %}{{ caller(x, loop.index) }}{% endfor %}{% endmacro %}{% call(v, n) each(l) %}[{{ n }}:{{ v }}]{% endcall %}"),
    ("s_filter_block", "{% filter upper %}abc {{ s }}{% endfilter %} {% filter replace('a', 'b')|upper %}aaa{% endfilter %}"),
    ("s_with", "{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]"),
    ("s_raw", "{% raw %}{{ not }} {% evaluated %}{% endraw %}!"),
    ("s_comment", "a{# comment {{ x }} #}b{#- trimmed -#}  c"),
    ("s_print", "{% print 'p' ~ 1 %}"),
    ("s_generation", "{% generation %}gen {{ i }}{% endgeneration %}"),
    # globals
    ("g_range", "{{ range(3)|list }} {{ range(1, 10, 3)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }}"),
    ("g_dict", "{{ dict(a=1, b='x') }} {{ dict() }}"),
    ("g_strftime", "{{ strftime_now('%Y-%m-%d %H:%M:%S') }} {{ strftime_now('%d %B %Y') }} {{ strftime_now('%a %b %-d') }}"),
    ("g_raise", "a{{ raise_exception('Custom failure: ' ~ i) }}"),
    # whitespace control (trim_blocks + lstrip_blocks)
    ("ws_trim_blocks", "{% if t %}\nyes\n{% endif %}\nafter\n"),
    ("ws_lstrip", "  {% if t %}\n    x\n  {% endif %}\n  {{ i }}\n"),
    ("ws_minus", "a   {%- if t -%}   b   {%- endif -%}   c {{- ' d ' -}} e\n\n"),
    ("ws_plus", "  {%+ if t +%}\nx\n  {%+ endif %}\ny"),
    ("ws_comment", "  {# c #}\nx\n{#- c2 #}  \ny {# c3 -#}  \n z"),
    ("ws_var_no_lstrip", "  {{ i }}\n  {% set q = 1 %}\n{{ q }}"),
    ("ws_crlf", "a\r\n{% if t %}\r\nb\r\n{% endif %}\r\nc\r\n"),
    ("ws_trailing_nl", "x\n\n"),
    ("ws_inline_blocks", "x {% if t %} y {% endif %} z\n{% for a in l %}{{ a }} {% endfor %}\n"),
    ("ws_raw", "  {% raw %}\n  {{ x }}\n  {% endraw %}\nz"),
    ("ws_tabs", "\t{% if t %}\n\tx\n\t{% endif %}\n"),
    ("ws_unicode_space", "a\u3000{%- if t %}b{% endif %}"),
    # undefined behaviour
    ("undef_print", "[{{ x }}] [{{ x ~ 'a' }}] [{{ x|default('') }}] {{ x == none }} {{ not x }} {{ 'a' in x }}"),
    ("undef_attr_error", "{{ x.y }}"),
    ("undef_add_error", "{{ 'a' + x }}"),
    ("undef_item_error", "{{ e[0].role }}"),
    # idioms from other published chat templates (Llama, Mistral, Gemma, DeepSeek, Hermes...)
    ("i_mistral_alt", "{% for m in users %}{% if (m.age > 30) != (loop.index0 % 2 == 0) %}x{% else %}y{% endif %}{% endfor %}"),
    ("i_llama_date", "{%- if not date_string is defined %}{%- set date_string = '26 Jul 2024' %}{%- endif %}{{ date_string }}|{{ strftime_now('%d %b %Y') }}"),
    ("i_default_flag", "{%- set tools_in_user_message = true if tools_in_user_message is not defined else tools_in_user_message %}{{ tools_in_user_message }}"),
    ("i_map_tojson", "{{ users|map(attribute='name')|list|tojson }} {{ users|selectattr('admin', 'defined')|map(attribute='name')|join(', ') }}"),
    ("i_equalto", "{{ users|selectattr('name', 'equalto', 'bob')|list|length }} {{ users|selectattr('age', '>', 26)|map(attribute='name')|list }}"),
    ("i_for_if", "{% for u in users if u.name != 'bob' %}{{ u.name }}{{ ',' if not loop.last }}{% endfor %}"),
    ("i_tuple_target", "{% for (k, v) in d.items() %}{{ k }}{% endfor %} {% for k, v in d|dictsort %}{{ k }}{% endfor %}"),
    ("i_neg_index", "{{ users[-1].name }} {{ users[1:]|map(attribute='age')|sum }} {{ (users|last).name }}"),
    ("i_cond_chain", "{% set c = s if s is string else s[0]['text'] %}{{ c }} {{ 'long' if s|length > 5 else 'short' }}"),
    ("i_ns_flags", "{% set ns = namespace(is_first=false, is_tool=false, out='') %}{% for u in users %}{% if not ns.is_first %}{% set ns.is_first = true %}{% set ns.out = ns.out + u.name %}{% else %}{% set ns.out = ns.out + '|' + u.name %}{% endif %}{% endfor %}{{ ns.out }} {{ ns.is_first }}"),
    ("i_split_think", "{% set c = '<think>\\nx\\n</think>\\n\\nanswer' %}{{ c.split('</think>')[-1].lstrip('\\n') }}|{{ c.split('</think>')[0].split('<think>')[-1].strip() }}"),
    ("i_strip_chars", "{{ '\\n\\nhi\\n'.strip('\\n') }}|{{ 'xxhixx'.strip('x') }}|{{ '  hi  '.rstrip() }}|"),
    ("i_bos", "{{- bos_token if bos_token is defined else '<s>' }}{{ eos_token|default('</s>') }}"),
    ("i_string_concat_types", "{{ 'n=' ~ 3 ~ ', f=' ~ 0.5 ~ ', b=' ~ false ~ ', l=' ~ l }}"),
    ("i_indent_json", "{{ {'name': 'f', 'parameters': {'type': 'object', 'properties': {}}}|tojson(indent=4) }}"),
    ("i_items_nested", "{% for name, spec in {'a': {'type': 'string'}, 'b': {'type': 'integer', 'enum': [1, 2]}}|items %}{{ name }}:{{ spec.type }}{% if spec.enum is defined %}{{ spec.enum|tojson }}{% endif %};{% endfor %}"),
    ("i_macro_value", "{% macro t(x) %}{{ x|upper }}{% endmacro %}{% set r = t('a') %}{{ r }}{{ r|length }}{% if t('') %}T{% else %}F{% endif %}"),
    ("i_nested_macros", "{% macro a(x) %}[{{ x }}]{% endmacro %}{% macro b(y) %}{{ a(y) ~ a(y * 2) }}{% endmacro %}{{ b(2) }}"),
    ("i_loop_last_ws", "{%- for x in l -%}\n  {{- x -}}\n  {%- if not loop.last %}, {% endif -%}\n{%- endfor %}"),
    ("i_is_tests_mix", "{{ none is none }} {{ 0 is none }} {{ '' is string and ''|length == 0 }} {{ [] is iterable and [] is not string }} {{ {} is mapping }}"),
    ("i_contains_list", "{{ 'a' in ['a', 'b'] }} {{ 'c' not in ['a', 'b'] }} {{ 1 in [1.0] }} {{ none in [none] }} {{ 'ab' in 'xaby' }}"),
    ("i_bool_ops", "{{ true and 'x' }} {{ false or none }} {{ not none }} {{ (1 == 1) == true }} {{ true == 1 }} {{ true + true }}"),
    ("i_messages_roles", "{% set ms = [{'role': 'system', 'content': 'S'}, {'role': 'user', 'content': 'U'}] %}{% if ms[0]['role'] == 'system' %}{% set sys = ms[0]['content'] %}{% set rest = ms[1:] %}{% endif %}{{ sys }}{{ rest|length }}{{ rest[0].content }}"),
    ("i_tool_args_str", "{% set a = '{\"x\": 1}' %}{% if a is string %}{{ a }}{% else %}{{ a|tojson }}{% endif %} {% set b = {'x': 1} %}{% if b is string %}{{ b }}{% else %}{{ b|tojson }}{% endif %}"),
    ("i_unicode_ops", "{{ 'Ünïcödé'|length }} {{ 'Ünïcödé'[2:5] }} {{ 'Ünïcödé'|upper }} {{ 'ÀÉÎ'|lower }} {{ 'straße'|upper }} {{ 'Ω'.lower() }}"),
    ("i_emoji_json", "{{ '😀 é'|tojson }} {{ {'k': '日本'}|tojson }} {{ '\\u2028'|tojson }}"),
    ("i_round_trip_floats", "{{ [0.1, 1.5, 100.0, 1e21, 1.5e-7, 123456789012.5, 3.0e10]|tojson }} {{ 2.675|round(2) }} {{ 0.5|round }} {{ 1.5|round }}"),
    ("i_int_ops", "{{ 7 // 2 * 2 + 7 % 2 }} {{ -1 // 3 }} {{ 2 ** 0.5 }} {{ 10 / 4 }} {{ (5 / 2)|int }} {{ 3 * 1.5 }}"),
    ("i_string_cmp", "{{ 'a' < 'b' }} {{ 'B' < 'a' }} {{ 'abc' == 'abc' }} {{ 'a' ~ 'b' == 'ab' }} {{ [1, 'a'] == [1, 'a'] }}"),
    ("i_set_tuple_swap", "{% set a, b = 1, 2 %}{% set a, b = b, a %}{{ a }}{{ b }}"),
    ("i_call_kwargs", "{% macro f(a, b=2, c=3) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ f(1, c=9) }} {{ f(c=1, a=0) }} {{ f(*[7, 8]) }} {{ f(**{'a': 5}) }}"),
    ("i_filter_chain_args", "{{ users|map(attribute='name')|map('upper')|join('-')|replace('-', '+')|lower }}"),
    ("i_whitespace_mix", "<s>\n{%- for u in users %}\n  {%- if u.admin %}\n[{{ u.name }}]\n  {%- endif %}\n{%- endfor %}\n</s>"),
    ("i_raw_json", "{% raw %}{\"name\": {{ name }}}{% endraw %}"),
    ("i_comment_inline", "a {# x #} b {#- y -#} c"),
    ("i_trailing_ws_tags", "{% if t %}   \n  yes  \n{% endif %}   \nend"),
    ("i_loop_nested_vars", "{% for a in [1, 2] %}{% set outer = loop %}{% for b in [3] %}{{ outer.index }}{{ loop.index }}{{ a * b }} {% endfor %}{% endfor %}"),
    ("i_range_step", "{{ range(10, 0, -3)|list }} {{ range(-3, 3)|list }} {{ range(3)|reverse|list }} {{ range(2)|length }}"),
    ("i_dict_literal_order", "{{ {'b': 1, 'a': 2, 'b': 3} }} {{ {'x': 1}|items|list }} {{ dict(b=1, a=2)|dictsort }}"),
    ("i_undefined_chain", "{{ x|default('') ~ 'y' }} {{ d.missing|default('m') }} {{ (d.missing or 'o') }} {{ d.missing is none }} {{ d.missing is undefined }}"),
    ("i_first_last_str", "{{ 'hello'|first }}{{ 'hello'|last }} {{ [[1, 2], [3]]|first|last }} {{ {'a': 1}|first }}"),
    ("i_join_nums", "{{ [1, 2, 3]|join }} {{ [1, none, true]|join(',') }} {{ ('a', 'b')|join }}"),
    ("i_replace_unicode", "{{ 'héllo'|replace('é', 'e') }} {{ 'a.b.c'.replace('.', '') }} {{ 'xx'|replace('x', 'yy', 1) }}"),
    ("i_capitalize_title", "{{ 'hello WORLD'|title }} {{ \"o'neil mc-donald\"|title }} {{ 'élan'|capitalize }} {{ 'x1y'.title() }}"),
    ("i_startswith_tuple", "{{ 'image_url'.startswith(('image', 'video')) }} {{ 'abc'.endswith(('x', 'bc')) }} {{ 'abc'.startswith('') }}"),
    ("e_none_add", "{{ none + 1 }}"),
    ("e_str_minus", "{{ 'a' - 'b' }}"),
    ("e_cmp_types", "{{ 1 < 'a' }}"),
    ("e_iter_int", "{% for x in 5 %}{% endfor %}"),
    ("e_unpack", "{% for a, b in [[1, 2, 3]] %}{% endfor %}"),
    ("e_macro_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}"),
    ("e_split_empty", "{{ 'a'.split('') }}"),
    ("e_index_missing", "{{ 'abc'.index('z') }}"),
    ("e_undefined_call_method", "{{ d.missing.strip() }}"),
    ("e_join_non_str", "{{ ', '.join([1, 2]) }}"),
    ("e_tojson_undef", "{{ x|tojson }}"),
    # errors
    ("err_type_add", "{{ 'a' + 1 }}"),
    ("err_div0", "{{ 1 / 0 }}"),
    ("err_append", "{% set x = [1] %}{{ x.append(2) }}"),
    ("err_not_ns", "{% set dd = {} %}{% set dd.a = 1 %}"),
    ("err_items", "{{ 5|items|list }}"),
    ("err_call_undef", "{{ nosuch() }}"),
    ("err_macro_kw", "{% macro m(a) %}{% endmacro %}{{ m(b=1) }}"),
]


def render_case(tmpl, c):
    kwargs = dict(c["kwargs"])
    return tmpl.render(messages=c["messages"], tools=c["tools"], documents=None,
                       add_generation_prompt=c["add_generation_prompt"], **kwargs)


def error_text(exc):
    if isinstance(exc, RaisedError):
        return "raise: " + str(exc.args[0])
    return "error: %s: %s" % (type(exc).__name__, exc)


def write(path, text):
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write(text)


def templates(tdir):
    for fn in sorted(os.listdir(tdir)):
        if fn.endswith(".jinja"):
            with open(os.path.join(tdir, fn), encoding="utf-8", newline="") as f:
                yield fn[: -len(".jinja")], f.read()


def make_cases(env, tdir, out):
    n_ok = n_err = 0
    for tname, src in templates(tdir):
        tmpl = env.from_string(src)
        for c in CASES:
            base = os.path.join(out, "%s__%s" % (tname, c["name"]))
            for ext in (".txt", ".err"):
                if os.path.exists(base + ext):
                    os.remove(base + ext)
            try:
                write(base + ".txt", render_case(tmpl, c))
                n_ok += 1
            except Exception as exc:  # the expected error is the fixture
                write(base + ".err", error_text(exc) + "\n")
                n_err += 1
    with open(os.path.join(out, "cases.json"), "w", encoding="utf-8") as f:
        json.dump(CASES, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return n_ok, n_err


def make_snippets(env, out):
    rows = []
    for name, src in SNIPPETS:
        row = {"name": name, "template": src}
        try:
            row["expected"] = env.from_string(src).render(**SNIPPET_CTX)
        except Exception as exc:
            row["error"] = error_text(exc)
        rows.append(row)
    with open(os.path.join(out, "snippets.json"), "w", encoding="utf-8") as f:
        json.dump({"context": SNIPPET_CTX, "snippets": rows}, f, ensure_ascii=False, indent=1)
        f.write("\n")
    return rows


def main():
    tdir = sys.argv[1] if len(sys.argv) > 1 else "../shared/data/templates"
    out = sys.argv[2] if len(sys.argv) > 2 else "tests/fixtures/templates"
    os.makedirs(out, exist_ok=True)
    env = make_env()
    n_ok, n_err = make_cases(env, tdir, out)
    rows = make_snippets(env, out)
    n_serr = sum(1 for r in rows if "error" in r)
    print("jinja2 %s: %d renders, %d expected errors; %d snippets (%d errors)"
          % (jinja2.__version__, n_ok, n_err, len(rows), n_serr))


if __name__ == "__main__":
    main()
