#!/usr/bin/env python3
"""tools/kcpu/rewrite.py IN.cu OUT.cpp — the kcpu rewrite (see tools/kcpu/kcpu.h) of a .cu
or .cuh file.

Turns every `callee<<<cfg>>>(args)` into
`kcpu::launch(kcpu::site{"callee", __FILE__, __LINE__}, callee, kcpu::cfg(cfg), args)`, and
every `__shared__ T a[N], b;` into `KCPU_SHARED(T, a, [N]); KCPU_SHARED(T, b, );` (the running
block's heap copy). Newlines are kept where they were and the output starts with
`#line 1 "IN.cu"`, so compiler diagnostics and __LINE__ name the original file and line. The
callee is the identifier (with `::`) before `<<<`, with its template arguments `<...>` if any.
"""
import re
import sys


def callee_start(src, i):
    """Index where the kernel expression ending just before src[i] (at `<<<`) starts."""
    j = i - 1
    while j >= 0 and src[j].isspace():
        j -= 1
    if src[j] == ">":  # template arguments: match back to their `<`
        depth = 0
        while j >= 0:
            if src[j] == ">":
                depth += 1
            elif src[j] == "<":
                depth -= 1
                if depth == 0:
                    break
            j -= 1
        j -= 1
        while j >= 0 and src[j].isspace():
            j -= 1
    while j >= 0 and (src[j].isalnum() or src[j] in "_:"):
        j -= 1
    if j + 1 >= i:
        sys.exit(f"rewrite.py: no kernel name before <<< at offset {i}")
    return j + 1


def in_comment(src, i):
    """True when src[i] lies in a // or /* */ comment (strings are not looked at)."""
    line = src.rfind("\n", 0, i) + 1
    return "//" in src[line:i] or src.rfind("/*", 0, i) > src.rfind("*/", 0, i)


def split_top(text):
    """text split at the commas outside (), [], {} and <>."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(text):
        if ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:k])
            start = k + 1
    parts.append(text[start:])
    return parts


DECL = re.compile(r"^(?P<type>.*?)(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\]]*\]\s*)*)$", re.S)


def rewrite_shared(src):
    out, pos = [], 0
    for m in re.finditer(r"\b__shared__\b", src):
        i = m.start()
        if i < pos or in_comment(src, i):
            continue
        if re.search(r"\bextern\s+$", src[max(0, i - 20):i]):
            sys.exit(f"rewrite.py: extern __shared__ (dynamic shared memory) at offset {i}")
        end = src.find(";", m.end())
        if end < 0:
            sys.exit(f"rewrite.py: unterminated __shared__ declaration at offset {i}")
        decls = split_top(src[m.end():end])
        first = DECL.match(decls[0].strip())
        if not first or not first["type"].strip():
            sys.exit(f"rewrite.py: cannot read the __shared__ declaration at offset {i}")
        typ = " ".join(first["type"].split())
        if "," in typ:
            sys.exit(f"rewrite.py: a __shared__ type with a comma at offset {i}")
        parts = []
        for k, d in enumerate(decls):
            dm = first if k == 0 else DECL.match(d.strip())
            if not dm or (k and dm["type"].strip()) or "=" in d:
                sys.exit(f"rewrite.py: cannot read the __shared__ declarator '{d.strip()}'")
            parts.append(f"KCPU_SHARED({typ}, {dm['name']}, {''.join(dm['dims'].split())})")
        newlines = src.count("\n", i, end)
        out.append(src[pos:i] + "; ".join(parts) + "\n" * newlines)
        pos = end
    out.append(src[pos:])
    return "".join(out)


def rewrite(src):
    out, pos = [], 0
    while True:
        i = src.find("<<<", pos)
        if i < 0:
            out.append(src[pos:])
            return "".join(out)
        start = callee_start(src, i)
        # text before the callee was copied already up to pos <= start
        out.append(src[pos:start])
        callee = src[start:i]
        close = src.find(">>>", i + 3)
        m = re.compile(r"\s*\(").match(src, close + 3)
        if close < 0 or not m:
            sys.exit(f"rewrite.py: unterminated launch at offset {i}")
        cfg = src[i + 3:close]
        after = m.end()  # just past the `(` of the argument list
        empty = re.compile(r"\s*\)").match(src, after) is not None
        name = " ".join(callee.split()).replace('"', "")
        out.append(f'kcpu::launch(kcpu::site{{"{name}", __FILE__, __LINE__}}, {callee}, '
                   f"kcpu::cfg({cfg}){src[close + 3:m.end() - 1]}{'' if empty else ', '}")
        pos = after


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: rewrite.py IN.cu|IN.cuh OUT")
    with open(sys.argv[1]) as f:
        src = f.read()
    body = rewrite(rewrite_shared(src))
    with open(sys.argv[2], "w") as f:
        f.write(f'#line 1 "{sys.argv[1]}"\n{body}')


if __name__ == "__main__":
    main()
