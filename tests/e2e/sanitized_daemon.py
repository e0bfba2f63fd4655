"""sanitized_daemon.py BUILD_DIR — the daemon's concurrent paths under a sanitizer build
(issue 9): run by test_sanitized_daemon.sh with ASAN_OPTIONS (detect_leaks=1) or TSAN_OPTIONS set.

1. The short load mix (tools/loadtest.py: streams, non-streaming chat and completions,
   cancellations mid-stream, oversize bodies, malformed JSON, slow-drip and stalled clients)
   against BUILD_DIR/deltad, then SIGTERM: every request answered, no slot leaked, exit 0.
2. SIGTERM with streams still running (drain_timeout 1 s): the drain cancels them, every client
   gets an end (an error event or the close), exit 0.
3. Every daemon log of the run is free of sanitizer reports (AddressSanitizer, LeakSanitizer,
   UBSan "runtime error", ThreadSanitizer). A leak makes LeakSanitizer print its report and
   exit 23, a TSan report makes the exit status 66: both fail the exit-status checks too.
"""

import os
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Daemon, eog_bias, run_main, stream, tiny_model  # noqa: E402

B = sys.argv[1]
MODEL = tiny_model(B)
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
C = Checks("test_sanitized_daemon")
CHAT = "/v1/chat/completions"
MARKS = ("ERROR: AddressSanitizer", "ERROR: LeakSanitizer", "runtime error:",
         "WARNING: ThreadSanitizer", "SUMMARY: ")
LOAD_SECONDS = os.environ.get("SAN_LOAD_SECONDS", "12")


def clean_log(path, what):
    with open(path, errors="replace") as f:
        log = f.read()
    found = [line for line in log.splitlines() if any(m in line for m in MARKS)]
    C.ok(not found, "%s: no sanitizer report in %s" % (what, path), found[:5])


def load_mix():
    cmd = [sys.executable, os.path.join(ROOT, "tools", "loadtest.py"), "--build", B,
           "-c", os.environ.get("SAN_CLIENTS", "8"), "-t", LOAD_SECONDS, "--warmup", "2",
           "--idle-timeout", "2", "--slots", "4", "--queue-max", "8", "--rss-tolerance", "-1"]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    out = p.stdout.decode(errors="replace")
    print(out)
    C.ok(p.returncode == 0, "load mix (streams, cancels, errors, slow clients) then SIGTERM: "
         "every request answered, no leaked slot, exit 0", out[-1000:])
    clean_log(os.path.join(B, "test-logs", "loadtest-deltad.log"), "load mix")


def drain_in_flight():
    d = Daemon(B, MODEL, ["--slots", "2", "--drain-timeout", "1", "--log-level", "info"],
               name="sanitized_drain").start()
    bias = eog_bias(d.port)
    body = {"messages": [{"role": "user", "content": "go on forever"}], "max_tokens": 100000,
            "logit_bias": bias, "stream": True}
    results = []

    def client():
        try:
            results.append(stream(d.port, CHAT, body, timeout=120)[0])
        except OSError as ex:
            results.append(repr(ex))

    threads = [threading.Thread(target=client) for _ in range(3)]
    for th in threads:
        th.start()
    time.sleep(1.5)
    d.proc.send_signal(signal.SIGTERM)
    for th in threads:
        th.join(60)
    rc = d.proc.wait(60)
    d.log.close()
    C.ok(rc == 0, "SIGTERM with streams in flight: exit 0 (leaks would make it 23)", rc)
    C.ok(len(results) == 3 and not any(th.is_alive() for th in threads),
         "every in-flight stream ended", results)
    clean_log(d.log_path, "drain")


def main():
    load_mix()
    drain_in_flight()
    return C.finish()


if __name__ == "__main__":
    run_main(main, C)
