"""bad_inputs.py BUILD_DIR [--print] — executes the tables of docs/bad-inputs.md (issue 9).

Every table row whose "Sent as" cell is a backticked tuple (Python literals, + and * only) is
run, and its
"Answer" cell is checked against what the daemon (or the binary) actually did:

  ("POST", PATH, BODY[, HEADERS])  one HTTP request to a daemon started with --api-key K, the
                                   limits below and the tiny model; BODY is a dict/list (sent as
                                   JSON), str or bytes; "@OVER" as BODY = max_body + 1 bytes;
                                   HEADERS replace the default "Authorization: Bearer K".
  ("GET" | "PUT" | ..., PATH[, None, HEADERS])
  ("raw", BYTES)                   BYTES on a fresh connection, then read until the close
  ("cli", [ARGS...])               BUILD/deltad ARGS ("@MODEL" = the tiny model's path)
  ("conf", TEXT)                   `deltad serve --config FILE` with "model = <tiny>" + TEXT
  ("gguf", EDIT[, VALUE])          `deltad serve --port 0 --model FILE`, FILE = the tiny model
                                   edited: empty, truncate N, magic, version V, n_tensors N,
                                   n_kv N, text, dir, missing, no_arch

Answer cells: `400 invalid_request_error messages` (status, error.type, error.param when
given), `413`, `cut` (the server closed the connection without an answer), `exit 2 'port'`
(exit status and a text the message must contain). Rows whose cell is not a tuple are prose
(checked by the unit, golden or fuzz test the row names).

--print shows each row's actual answer instead of checking (for writing new rows).
"""

import ast
import json
import os
import re
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Daemon, request, run_main, tiny_model  # noqa: E402

B = sys.argv[1]
PRINT = "--print" in sys.argv
MODEL = tiny_model(B)
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DOC = os.path.join(ROOT, "docs", "bad-inputs.md")
KEY = "sk-test-9f2c"
MAX_BODY, IDLE, N_CTX = 65536, 2, 512
C = Checks("test_bad_inputs")


def rows():
    """(line number, input text, sent-as literal, answer text) of every executable row."""
    out = []
    with open(DOC) as f:
        for ln, line in enumerate(f, 1):
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            if len(cells) < 3 or not cells[1].startswith("`("):
                continue
            out.append((ln, cells[0], cells[1].strip("`"), cells[2].strip("`")))
    return out


def literal(sent):
    """The cell's tuple: Python literals plus + and * on them (b"a" * 20000), nothing else."""
    tree = ast.parse(sent.replace("\\|", "|"), mode="eval")
    for node in ast.walk(tree):
        if isinstance(node, (ast.Call, ast.Name, ast.Attribute, ast.Subscript, ast.Lambda)):
            raise ValueError("only literals, + and * are allowed in a row")
    return eval(compile(tree, "bad-inputs.md", "eval"), {"__builtins__": {}}, {})


# ---- ways to send -----------------------------------------------------------------------------

def http(port, method, path, body=None, headers=None):
    h = {"Authorization": "Bearer " + KEY} if headers is None else headers
    if body == "@OVER":
        body = b"x" * (MAX_BODY + 1)
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
        h = dict(h, **{"Content-Type": "application/json"})
    try:
        st, _, data = request(port, method, path, body, h, timeout=30)
    except (ConnectionError, OSError):
        return {"cut": True}
    try:
        err = json.loads(data).get("error", {})
    except (ValueError, AttributeError):
        err = {}
    # issue 32: OpenAI's typed clients declare error.code as string | null, never a number
    code_ok = not isinstance(err, dict) or isinstance(err.get("code"), (str, type(None)))
    return {"status": st, "type": err.get("type"), "param": err.get("param"),
            "code_ok": code_ok, "text": data.decode(errors="replace")}


def raw(port, data):
    s = socket.create_connection(("127.0.0.1", port), timeout=IDLE + 10)
    got = b""
    try:
        s.sendall(data)
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
    except (ConnectionError, socket.timeout):
        pass
    finally:
        s.close()
    m = re.match(rb"HTTP/1\.[01] (\d+)", got)
    if not m:
        return {"cut": True}
    return {"status": int(m.group(1)), "text": got.decode(errors="replace")}


def run_binary(args, timeout=60):
    args = [os.path.abspath(MODEL) if a == "@MODEL" else a for a in args]
    p = subprocess.run([os.path.join(B, "deltad")] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout)
    return {"exit": p.returncode, "text": p.stdout.decode(errors="replace")}


def conf(tmp, text):
    path = os.path.join(tmp, "bad.conf")
    with open(path, "w") as f:
        if not re.match(r"\s*model\s*=", text):
            f.write("model = %s\n" % os.path.abspath(MODEL))
        f.write(text + "\n")
    return run_binary(["serve", "--config", path, "--port", "0"])


def gguf(tmp, edit, value=None):
    with open(MODEL, "rb") as f:
        data = bytearray(f.read())
    path = os.path.join(tmp, "bad.gguf")
    if edit == "empty":
        data = b""
    elif edit == "truncate":
        data = data[:value]
    elif edit == "magic":
        data[0:4] = b"GGUX"
    elif edit == "version":
        data[4:8] = value.to_bytes(4, "little")
    elif edit == "n_tensors":
        data[8:16] = value.to_bytes(8, "little")
    elif edit == "n_kv":
        data[16:24] = value.to_bytes(8, "little")
    elif edit == "text":
        data = b"model = not a gguf file\n" * 10
    elif edit == "dir":
        path = tmp
    elif edit == "missing":
        path = os.path.join(tmp, "nothing-here.gguf")
    elif edit == "no_arch":
        path = os.path.join(ROOT, "tests", "fuzz", "corpus", "gguf", "kinds.gguf")
    if edit not in ("dir", "missing", "no_arch"):
        with open(path, "wb") as f:
            f.write(data)
    return run_binary(["serve", "--port", "0", "--model", path])


# ---- answers ----------------------------------------------------------------------------------

def matches(answer, got):
    """Does the actual result satisfy the Answer cell ("A or B": either)?"""
    if " or " in answer:
        return any(matches(a.strip(), got) for a in answer.split(" or "))
    words = answer.split()
    if words[0] == "cut":
        return got.get("cut", False)
    if words[0] == "exit":
        want = re.findall(r"'([^']*)'", answer)
        return "exit" in got and got["exit"] == int(words[1]) and all(w in got["text"] for w in want)
    if got.get("cut") or "status" not in got or got["status"] != int(words[0]):
        return False
    if len(words) > 1 and got.get("type") != words[1]:
        return False
    if len(words) > 2 and (got.get("param") or "") != words[2]:
        return False
    return True


def describe(got):
    if got.get("cut"):
        return "cut"
    if "exit" in got:
        lines = [ln for ln in got["text"].splitlines() if "error" in ln or "HINT" in ln]
        return "exit %d: %s" % (got["exit"], " / ".join(lines)[:200])
    return "%s %s %s" % (got["status"], got.get("type") or "", got.get("param") or "")


def execute(d, tmp, lit):
    kind = lit[0]
    if kind == "raw":
        return raw(d.port, lit[1])
    if kind == "cli":
        return run_binary(lit[1])
    if kind == "conf":
        return conf(tmp, lit[1])
    if kind == "gguf":
        return gguf(tmp, *lit[1:])
    return http(d.port, *lit)


def main():
    table = rows()
    C.ok(len(table) >= 40, "docs/bad-inputs.md has its executable rows (%d)" % len(table))
    d = Daemon(B, MODEL, ["--api-key", KEY, "--max-body", str(MAX_BODY), "--idle-timeout",
                          str(IDLE), "--ctx", str(N_CTX), "--slots", "2", "--max-json-depth", "32"],
               name="bad_inputs").start()
    with tempfile.TemporaryDirectory() as tmp:
        for ln, what, sent, answer in table:
            try:
                lit = literal(sent)
                got = execute(d, tmp, lit)
            except Exception as ex:  # a row that cannot run is a failed row
                got = {"exit": -1, "text": "cannot run: %r" % ex}
            if PRINT:
                print("%4d  %-40.40s  doc: %-36.36s  got: %s" % (ln, what, answer, describe(got)))
            else:
                C.ok(matches(answer, got), "docs/bad-inputs.md:%d %s -> %s" % (ln, what, answer),
                     describe(got))
                C.ok(got.get("code_ok", True), "docs/bad-inputs.md:%d error.code is a string or "
                     "null" % ln, got.get("text", "")[:200])
    st, _, _ = request(d.port, "GET", "/health")
    C.ok(st == 200, "the daemon still answers after every bad input")
    C.ok(d.stop() == 0, "clean exit after SIGTERM")
    return C.finish()


if __name__ == "__main__":
    run_main(main, C)
