"""harness.py — shared helpers of the end-to-end tests that drive `deltad serve` over HTTP.

Python standard library only. A Daemon starts the real binary on 127.0.0.1 with a free port,
waits for /health, and stops it with SIGTERM (checking the exit status); every HTTP call has a
timeout, and every process a test starts is killed at exit, so a test never hangs or leaks.
A test script takes BUILD_DIR as its argument, serves tiny_model(BUILD_DIR), counts its checks
in a Checks and ends with run_main, which turns a crash into a failed, summarised run.
"""

import atexit
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback

_procs = []


def _kill_all():
    for p in _procs:
        if p.poll() is None:
            p.kill()
            p.wait()


atexit.register(_kill_all)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def tiny_model(build):
    """The fixture model every daemon test serves (tests/run.sh generates it with mkmodel)."""
    return os.path.join(build, "models", "tiny-qwen35.gguf")


class Daemon:
    """`deltad serve` with the given extra flags, logging to LOG_DIR/<name>.log. env: variables
    to set in the daemon's environment (value None: removed), on top of this process's."""

    def __init__(self, build, model, args=(), name="deltad", log_dir=None, env=None):
        self.build, self.model, self.args, self.name = build, model, list(args), name
        self.env = env
        self.log_path = os.path.join(log_dir or build + "/test-logs", name + ".log")
        self.port = None
        self.proc = None

    def start(self, wait_s=60):
        self.port = free_port()
        cmd = [self.build + "/deltad", "serve", "--model", self.model, "--host", "127.0.0.1",
               "--port", str(self.port)] + self.args
        env = None
        if self.env is not None:
            env = dict(os.environ)
            for k, v in self.env.items():
                if v is None:
                    env.pop(k, None)
                else:
                    env[k] = v
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        _procs.append(self.proc)
        deadline = time.time() + wait_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("%s exited with %d at start-up; see %s" %
                                   (self.name, self.proc.returncode, self.log_path))
            try:
                if request(self.port, "GET", "/health", timeout=2)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("%s did not become healthy in %d s" % (self.name, wait_s))

    def stop(self, wait_s=40):
        """SIGTERM, then the exit status (None when it had to be killed)."""
        if not self.proc or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            return None
        finally:
            self.log.close()

    def log_text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()


def request(port, method, path, body=None, headers=None, timeout=60, host="127.0.0.1"):
    """One HTTP request; returns (status, headers dict with lower-case names, body bytes)."""
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    elif isinstance(body, str):
        body = body.encode()
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        c.close()


def post_json(port, path, obj, headers=None, timeout=120):
    """POST a JSON body; returns (status, headers, parsed JSON or None)."""
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    st, hd, data = request(port, "POST", path, obj, h, timeout)
    try:
        return st, hd, json.loads(data)
    except ValueError:
        return st, hd, None


def eog_bias(port):
    """logit_bias banning the end-of-generation tokens, so runs last exactly max_tokens."""
    _, _, t = post_json(port, "/tokenize", {"content": "<|endoftext|><|im_end|>"})
    return {str(i): -100 for i in (t or {}).get("tokens", [])}


def sse_parse(data):
    """The data: payloads of an SSE body, in order (comment lines skipped)."""
    events = []
    for block in data.decode("utf-8", "strict").split("\n\n"):
        lines = [l[5:].lstrip(" ") for l in block.split("\n") if l.startswith("data:")]
        if lines:
            events.append("\n".join(lines))
    return events


def stream(port, path, obj, headers=None, timeout=120, host="127.0.0.1"):
    """POST a streaming request; returns (status, headers, [(arrival time, payload), ...])."""
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        c.request("POST", path, body=json.dumps(obj).encode(), headers=h)
        r = c.getresponse()
        hd = {k.lower(): v for k, v in r.getheaders()}
        if r.status != 200:
            return r.status, hd, [(time.time(), r.read().decode())]
        events, buf = [], b""
        while True:
            chunk = r.read1(65536) if hasattr(r, "read1") else r.read(1)
            if not chunk:
                break
            buf += chunk
            while b"\n\n" in buf:
                block, buf = buf.split(b"\n\n", 1)
                for p in sse_parse(block + b"\n\n"):
                    events.append((time.time(), p))
        return r.status, hd, events
    finally:
        c.close()


class Checks:
    """Counts checks; prints one line per failure and a final summary line."""

    def __init__(self, name):
        self.name, self.passed, self.failed = name, 0, 0

    def ok(self, cond, what, detail=""):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print("FAIL: %s%s" % (what, (" -- " + str(detail)[:600]) if detail != "" else ""))
            sys.stdout.flush()
        return cond

    def finish(self):
        print("%s: %d passed, %d failed" % (self.name, self.passed, self.failed))
        return 0 if self.failed == 0 else 1


def run_main(main, checks):
    """Exits with main()'s status. A crash is a failure with its reason, never a hang: the
    traceback, then the summary line with one more failure."""
    try:
        sys.exit(main())
    except Exception as ex:
        traceback.print_exc()
        print("%s: %d passed, %d failed (aborted: %s)" %
              (checks.name, checks.passed, checks.failed + 1, ex))
        sys.exit(1)


NGINX_MAIN = """
%(user)s
worker_processes 1;
daemon off;
pid %(dir)s/nginx.pid;
error_log %(dir)s/error.log warn;
events { worker_connections 256; }
http {
    access_log %(dir)s/access.log;
    client_body_temp_path %(dir)s/client_body;
    proxy_temp_path %(dir)s/proxy;
    fastcgi_temp_path %(dir)s/fastcgi;
    uwsgi_temp_path %(dir)s/uwsgi;
    scgi_temp_path %(dir)s/scgi;
    include %(dir)s/site.conf;
}
"""


def start_nginx(tmp, site):
    """A real nginx with its own files under tmp and `site` (http-context text; %(port)d is the
    port it listens on, picked here) as its whole configuration. Returns (process, port) once
    /health answers 200 through it."""
    port = free_port()
    with open(tmp + "/site.conf", "w") as f:
        f.write(site.replace("%(port)d", str(port)))
    user = "user root root;" if os.geteuid() == 0 else ""
    with open(tmp + "/nginx.conf", "w") as f:
        f.write(NGINX_MAIN % {"dir": tmp, "user": user})
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    p = subprocess.Popen([nginx, "-p", tmp, "-e", tmp + "/error.log", "-c", tmp + "/nginx.conf"],
                         stdout=subprocess.DEVNULL, stderr=open(tmp + "/stderr.log", "w"))
    _procs.append(p)
    for _ in range(200):
        try:
            if request(port, "GET", "/health", timeout=2)[0] == 200:
                return p, port
        except OSError:
            pass
        if p.poll() is not None:
            break
        time.sleep(0.05)
    p.kill()
    raise RuntimeError("nginx did not start: " + open(tmp + "/stderr.log").read()[-800:])


def stop_nginx(p):
    """Stop an nginx from start_nginx (None: nothing to do): SIGTERM, SIGKILL after 10 s."""
    if not p:
        return
    p.terminate()
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        p.kill()
