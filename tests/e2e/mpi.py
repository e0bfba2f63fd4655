"""mpi.py BUILD_DIR — one model over several processes under mpirun (test_mpi.sh).

1. `deltad logits` of 2 and 3 ranks (one CPU device each, and 2 ranks x 2 devices) on the tiny
   model of every arch, trunk and MTP rows: NMSE <= 1e-4 against one process with one device
   and the same argmax in every row.
2. `serve` through rank 0 of 2 ranks: the demo model answers "What is 23 + 45?" exactly as one
   process does, plain and streamed; /metrics shows the topology.
3. Speculation across ranks is lossless: greedy output with spec_type none equals ngram,mtp.
4. The prompt cache across ranks: cached answers equal uncached ones (checkpoints and KV rows
   come back from every rank).
5. A worker rank SIGKILLed mid-stream: the stream ends with an error event (no [DONE]), a
   non-streamed request in flight gets 503, rank 0's log names the failure,
   and the whole job ends within a bounded time. The same with a worker that stops answering
   (SIGSTOP): mpi_timeout passes, the client gets an error, rank 0 exits 1 and the job ends.
"""

import os
import re
import signal
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

B = sys.argv[1]
LOGS = os.path.join(B, "test-logs")
C = harness.Checks("test_mpi")
ENV = dict(os.environ, OMPI_MCA_btl="self,vader", OMPI_MCA_rmaps_base_oversubscribe="1",
           OMPI_MCA_btl_vader_single_copy_mechanism="none")
MPIRUN = ["mpirun", "--oversubscribe", "--bind-to", "none"] + \
    (["--allow-run-as-root"] if os.geteuid() == 0 else [])
DEMO = "models/demo.gguf"
QUESTION = {"model": "demo", "messages": [{"role": "user", "content": "What is 23 + 45?"}],
            "max_tokens": 16, "temperature": 0}


def read_f32(path):
    with open(path, "rb") as f:
        data = f.read()
    return struct.unpack("<%df" % (len(data) // 4), data)


def compare(ref, got, n_vocab, what):
    """NMSE over everything and the argmax of every row."""
    if not C.ok(len(ref) == len(got) and len(ref) > 0, what + ": sizes", (len(ref), len(got))):
        return
    err = sum((a - b) ** 2 for a, b in zip(ref, got))
    norm = sum(a * a for a in ref) or 1.0
    C.ok(err / norm <= 1e-4, what + ": NMSE <= 1e-4", err / norm)
    rows = len(ref) // n_vocab
    bad = [r for r in range(rows)
           if max(range(n_vocab), key=lambda i: ref[r * n_vocab + i]) !=
           max(range(n_vocab), key=lambda i: got[r * n_vocab + i])]
    C.ok(not bad, what + ": argmax of every row", bad)


def logits(model, out, np_=1, devices="cpu:1", mtp=False, name="logits"):
    cmd = [B + "/deltad", "logits", "-m", model, "--tokens", "1,5,9,23,7,100,3,44,12,8,9,10,11,2",
           "-o", out, "-t", "1", "--devices", devices] + (["--mtp"] if mtp else [])
    if np_ > 1:
        cmd = MPIRUN + ["-np", str(np_)] + cmd
    with open(os.path.join(LOGS, "mpi-%s.log" % name), "w") as log:
        rc = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, env=ENV, timeout=120).returncode
    C.ok(rc == 0, name + ": exit 0", rc)
    return rc == 0


def check_logits():
    for arch, mtp in (("qwen3", False), ("qwen35", True), ("qwen35moe", True),
                      ("qwen3next", True)):
        model = os.path.join(B, "models", "tiny-%s.gguf" % arch)
        ref = os.path.join(LOGS, "mpi-%s-ref.f32" % arch)
        if not logits(model, ref, mtp=mtp, name=arch + "-ref"):
            continue
        wrote = read_f32(ref)
        n_vocab = 272  # the tiny models' vocabulary (tools/mkmodel.c)
        for np_, dev in ((2, "cpu:1"), (3, "cpu:1")) + (((2, "cpu:2"),) if arch == "qwen35moe" else ()):
            tag = "%s-np%d-%s" % (arch, np_, dev.replace(":", ""))
            got = os.path.join(LOGS, "mpi-%s.f32" % tag)
            if os.path.exists(got):
                os.unlink(got)
            if logits(model, got, np_, dev, mtp, tag):
                compare(wrote, read_f32(got), n_vocab, tag)


class Job(harness.Daemon):
    """`mpirun -np N deltad serve ...`: rank 0 answers HTTP."""

    def __init__(self, np_, model, args=(), name="mpi-serve"):
        super().__init__(B, model, args, name)
        self.np = np_

    def start(self, wait_s=60):
        self.port = harness.free_port()
        cmd = MPIRUN + ["-np", str(self.np), B + "/deltad", "serve", "--model", self.model,
                        "--host", "127.0.0.1", "--port", str(self.port), "--threads", "1"] + self.args
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=ENV)
        harness._procs.append(self.proc)
        deadline = time.time() + wait_s
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("mpirun exited with %d at start-up; see %s" %
                                   (self.proc.returncode, self.log_path))
            try:
                if harness.request(self.port, "GET", "/health", timeout=2)[0] == 200:
                    return self
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("the job did not become healthy in %d s" % wait_s)

    def worker_pid(self, rank=1):
        m = re.search(r"rank %d \(pid (\d+)\)" % rank, self.log_text())
        return int(m.group(1)) if m else None


def answer(port, stream=False):
    if not stream:
        st, _, js = harness.post_json(port, "/v1/chat/completions", QUESTION)
        return st, js["choices"][0]["message"]["content"] if st == 200 else js
    st, _, ev = harness.stream(port, "/v1/chat/completions", dict(QUESTION, stream=True))
    text = ""
    for _, p in ev:
        if p != "[DONE]":
            text += (harness.json.loads(p)["choices"] or [{}])[0].get("delta", {}).get("content") or ""
    return st, text


def check_serve():
    one = harness.Daemon(B, DEMO, ["--threads", "1"], name="mpi-serve-one").start()
    want = (answer(one.port), answer(one.port, True))
    C.ok(one.stop() == 0, "one process: clean stop")
    C.ok(want[0] == (200, "23 + 45 = 68"), "one process answers 23 + 45 = 68", want)
    for np_ in (2, 3):
        job = Job(np_, DEMO, name="mpi-serve-np%d" % np_).start()
        got = (answer(job.port), answer(job.port, True))
        C.ok(got == want, "%d ranks answer exactly as one process" % np_, got)
        _, _, m = harness.request(job.port, "GET", "/metrics")
        C.ok(b"deltad_tp_ranks %d" % np_ in m and b"deltad_tp_devices %d" % np_ in m,
             "%d ranks: /metrics shows the topology" % np_)
        rc = job.stop()
        C.ok(rc is not None, "%d ranks: the job ends after SIGTERM" % np_, rc)


def check_spec():
    body = {"model": "m", "prompt": "one two three one two three one two", "max_tokens": 40,
            "temperature": 0}
    outs = {}
    for spec in ("none", "ngram,mtp"):
        job = Job(2, DEMO, ["--spec-type", spec], name="mpi-spec-" + spec.replace(",", "-")).start()
        st, _, js = harness.post_json(job.port, "/v1/completions", body)
        outs[spec] = (st, js["choices"][0]["text"] if st == 200 else js,
                      (js or {}).get("usage", {}).get("speculative", {}))
        job.stop()
    C.ok(outs["none"][0] == 200 and outs["none"][:2] == outs["ngram,mtp"][:2],
         "2 ranks: greedy output with speculation equals without", outs)
    C.ok(outs["ngram,mtp"][2].get("accepted_tokens", 0) > 0, "2 ranks: drafts were accepted",
         outs["ngram,mtp"][2])


def chat(port, system, user, bias, cache):
    body = {"messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
            "max_tokens": 8, "temperature": 0, "logit_bias": bias, "cache_prompt": cache}
    st, _, r = harness.post_json(port, "/v1/chat/completions", body)
    if st != 200:
        return None, -1
    return r["choices"][0]["message"]["content"], r["usage"]["prompt_tokens_details"]["cached_tokens"]


def check_prompt_cache():
    """The prompt cache across ranks (checkpoints and KV rows gathered from and scattered to
    every rank): one slot, two system prompts taking turns, so the second visit of each comes
    back from the RAM tier; every answer equals the uncached one."""
    words = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()
    systems = [" ".join(words[(i * 7 + k) % len(words)] for i in range(60)) for k in (1, 2)]
    job = Job(2, os.path.join(B, "models", "tiny-qwen35moe.gguf"),
              ["--slots", "1", "--ctx", "2048"], name="mpi-pcache").start()
    bias = harness.eog_bias(job.port)
    got, ref = [], []
    for turn in range(4):
        system = systems[turn % 2]
        got.append(chat(job.port, system, "question %d" % turn, bias, True))
        ref.append(chat(job.port, system, "question %d" % turn, bias, False))
    C.ok(all(g[0] is not None for g in got + ref), "prompt cache: requests answered", got)
    C.ok(all(g[1] > 40 for g in got[2:]), "prompt cache: the system prompts come back (cached "
         "tokens of turns 3 and 4)", [g[1] for g in got])
    C.ok([g[0] for g in got] == [r[0] for r in ref], "prompt cache: answers equal the uncached",
         (got, ref))
    job.stop()


def check_failure(sig, extra, what):
    job = Job(2, harness.tiny_model(B), ["--mpi-timeout", "2"] + extra,
              name="mpi-fail-" + what).start()
    pid = job.worker_pid()
    C.ok(pid is not None, what + ": the worker's pid is logged")
    bias = harness.eog_bias(job.port)
    body = {"model": "m", "prompt": "hello", "max_tokens": 100000, "temperature": 0,
            "logit_bias": bias, "stream": True}
    import threading
    res = {}

    def run():
        res["r"] = harness.stream(job.port, "/v1/completions", body, timeout=60)
        res["t"] = time.time()

    def run_plain():
        res["plain"] = harness.post_json(job.port, "/v1/completions", dict(body, stream=False),
                                         timeout=60)
    t = threading.Thread(target=run)
    t.start()
    t2 = threading.Thread(target=run_plain)
    t2.start()
    time.sleep(1.0)  # the stream is running
    t0 = time.time()
    os.kill(pid, sig)
    t.join(60)
    t2.join(60)
    C.ok("r" in res, what + ": the stream ended")
    st2, _, js2 = res.get("plain", (0, {}, None))
    C.ok(st2 == 503 and "error" in (js2 or {}), what + ": a request in flight, not streamed, gets "
         "503 with an error body", (st2, js2))
    st, _, ev = res.get("r", (0, {}, []))
    payloads = [p for _, p in ev]
    C.ok(st == 200 and len(payloads) > 2, what + ": tokens were streamed first", (st, len(payloads)))
    C.ok(payloads and "[DONE]" not in payloads and "error" in payloads[-1],
         what + ": the stream ends with an error event, no [DONE]", payloads[-1:])
    try:
        job.proc.wait(30)
    except subprocess.TimeoutExpired:
        pass
    rc = job.proc.poll()
    C.ok(rc is not None and rc != 0, what + ": the job ended, non-zero", rc)
    print("%s: the stream ended %.2f s and the job %.2f s after the signal; last event: %s" %
          (what, res.get("t", t0) - t0, time.time() - t0, payloads[-1:]))
    if sig == signal.SIGSTOP and rc is None:
        os.kill(pid, signal.SIGKILL)
    log = job.log_text()
    C.ok("rank 1" in log and ("broken" in log or "lost a process" in log),
         what + ": rank 0's log names the failed rank", log[-800:])
    C.ok(re.search(r"POST /v1/completions 200 \d+B [0-9.]+s id=\S+ error-event-503", log),
         what + ": the access log marks the stream that ended with the 503 error event",
         log[-800:])
    job.log.close()
    return log


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    t0 = time.time()
    check_logits()
    print("logits: %.1f s" % (time.time() - t0))
    if os.path.exists(DEMO):
        check_serve()
        check_spec()
    print("serve: %.1f s" % (time.time() - t0))
    check_prompt_cache()
    print("prompt cache: %.1f s" % (time.time() - t0))
    check_failure(signal.SIGKILL, [], "sigkill")
    check_failure(signal.SIGSTOP, [], "sigstop")
    print("total: %.1f s" % (time.time() - t0))
    return C.finish()


harness.run_main(main, C)
