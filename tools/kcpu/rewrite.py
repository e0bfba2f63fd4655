#!/usr/bin/env python3
"""tools/kcpu/rewrite.py IN.cu OUT.cpp — the kcpu launch rewrite (see tools/kcpu/kcpu.h).

Turns every `callee<<<cfg>>>(args)` of a .cu file into
`kcpu::launch(kcpu::site{"callee", __FILE__, __LINE__}, callee, kcpu::cfg(cfg), args)`.
Newlines are kept where they were and the output starts with `#line 1 "IN.cu"`, so compiler
diagnostics and __LINE__ name the original file and line. The callee is the identifier (with
`::`) before `<<<`, with its template arguments `<...>` if any.
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
        sys.exit("usage: rewrite.py IN.cu OUT.cpp")
    with open(sys.argv[1]) as f:
        src = f.read()
    body = rewrite(src)
    with open(sys.argv[2], "w") as f:
        f.write(f'#line 1 "{sys.argv[1]}"\n{body}')


if __name__ == "__main__":
    main()
