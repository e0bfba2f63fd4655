"""prompt_cache.py BUILD_DIR — the prompt cache of issue 36 on the hybrid (GDN) models, run by
test_prompt_cache.sh. Each case starts its own daemon.

The scenario: requests that share a system prompt and differ in the user message. From the
second one on, usage.prompt_tokens_details.cached_tokens must be at least the length of the
system turn's rendering (counted by /tokenize on the turn's text, apart from the engine's
cache), and every answer must equal the same request sent with cache_prompt false (no reuse)
at temperature 0 and at temperature 0.8 with a seed. Speculation (n-gram + MTP) is on, as by
default. Cases:

1. every hybrid arch, one slot: a ~250-token system prompt (and a ~3,500-token one on qwen35);
2. four slots: the prefix is copied from a busy slot into a free one;
3. one slot, eviction to RAM: a second system prompt evicts the first, which comes back from
   the RAM tier; a small cache_ram_max holds (LRU evictions, bytes within the limit);
4. restart from disk: the slots' checkpoints are written at shutdown, and the restarted daemon
   serves the first request from disk;
5. a damaged cache file, a garbage file and a file of another model are each ignored with one
   warning, and the answers stay right; writes that fail are counted, warned about once, and
   serving goes on; temporary files a killed daemon left are deleted at start-up (those of a
   live process are not);
6. two CPU devices (tensor parallel);
7. cache_disk_max: the files stay within it, the least recently used go, and a restarted
   daemon serves the newest system prompt from disk.
"""

import glob
import http.client
import json
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Checks, Daemon, eog_bias, post_json, request, run_main  # noqa: E402

B = sys.argv[1]
C = Checks("test_prompt_cache")
CHAT = "/v1/chat/completions"
HYBRID = ["tiny-qwen35.gguf", "tiny-qwen35moe.gguf", "tiny-qwen3next.gguf"]
WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango uniform victor whiskey xray").split()


def model(name):
    return os.path.join(B, "models", name)


def system_text(n_words, seed):
    """A system prompt of n_words words, different for each seed."""
    return " ".join(WORDS[(i * 7 + seed * 3 + i // 5) % len(WORDS)] for i in range(n_words))


QUESTIONS = ["What comes after delta?", "Spell the word kilo backwards.",
             "Name three words of the list.", "Which word follows mike?"]


def sys_tokens(port, text):
    """Tokens of the system turn's rendering (ChatML, the tiny models' template)."""
    st, _, t = post_json(port, "/tokenize",
                         {"content": "<|im_start|>system\n" + text + "<|im_end|>\n"})
    return len(t["tokens"]) if st == 200 else -1


def chat(port, system, user, bias, cache=True, temp=0.0, seed=None, max_tokens=8):
    body = {"messages": [{"role": "system", "content": system},
                         {"role": "user", "content": user}],
            "max_tokens": max_tokens, "temperature": temp, "logit_bias": bias,
            "cache_prompt": cache}
    if seed is not None:
        body["seed"] = seed
    st, _, r = post_json(port, CHAT, body)
    if st != 200:
        return None, -1
    return r["choices"][0]["message"]["content"], r["usage"]["prompt_tokens_details"][
        "cached_tokens"]


def metric(port, name, label=None):
    _, _, body = request(port, "GET", "/metrics")
    for line in body.decode().splitlines():
        if line.startswith(name + ("{tier=\"%s\"}" % label if label else " ")):
            return float(line.split()[-1])
    return None


def shared_prompt(C, d, tag, system, modes=((0.0, None), (0.8, 7))):
    """Three requests sharing system: the 2nd and 3rd reuse the system turn; answers equal the
    uncached ones."""
    bias = eog_bias(d.port)
    n_sys = sys_tokens(d.port, system)
    for temp, seed in modes:
        got = [chat(d.port, system, q, bias, True, temp, seed) for q in QUESTIONS[:3]]
        ref = [chat(d.port, system, q, bias, False, temp, seed) for q in QUESTIONS[:3]]
        what = "%s T=%g: " % (tag, temp)
        C.ok(all(g[0] is not None for g in got + ref), what + "requests answered", got)
        C.ok(all(g[1] >= n_sys for g in got[1:]), what + "requests 2 and 3 cache the %d-token "
             "system turn" % n_sys, [g[1] for g in got])
        C.ok([g[0] for g in got] == [r[0] for r in ref], what + "answers equal the uncached ones",
             (got, ref))
    return n_sys


def case_archs():
    for name in HYBRID:
        d = Daemon(B, model(name), ["--slots", "1", "--ctx", "8192"],
                   name="pcache-" + name[:-5]).start()
        shared_prompt(C, d, name, system_text(42, 1))
        if name == "tiny-qwen35.gguf":
            n = shared_prompt(C, d, name + " long", system_text(575, 2), ((0.0, None),))
            C.ok(3000 < n < 4000, "the long system prompt has about 3,500 tokens", n)
        C.ok(d.stop() == 0, name + ": clean exit")


def case_slots():
    """Four slots: request 1 keeps its slot busy (a long streamed answer, dropped once request 2
    is done) while request 2 with the same system prompt copies the prefix into another slot."""
    d = Daemon(B, model("tiny-qwen35.gguf"), ["--slots", "4", "--ctx", "4096"],
               name="pcache-slots").start()
    bias = eog_bias(d.port)
    system = system_text(42, 3)
    n_sys = sys_tokens(d.port, system)
    body = {"messages": [{"role": "system", "content": system},
                         {"role": "user", "content": QUESTIONS[0]}],
            "max_tokens": 3000, "temperature": 0, "logit_bias": bias, "stream": True}
    long_run = http.client.HTTPConnection("127.0.0.1", d.port, timeout=60)
    long_run.request("POST", CHAT, body=json.dumps(body).encode(),
                     headers={"Content-Type": "application/json"})
    long_run.getresponse()
    for _ in range(3000):  # until request 1 decodes, its checkpoints saved
        slots = json.loads(request(d.port, "GET", "/slots")[2])
        if any(s["state"] == "decode" and s["checkpoints"] for s in slots):
            break
    got = chat(d.port, system, QUESTIONS[1], bias)
    slots = json.loads(request(d.port, "GET", "/slots")[2])
    long_run.close()  # the client goes away: the engine cancels request 1
    ref = chat(d.port, system, QUESTIONS[1], bias, False)
    C.ok(any(s["state"] == "decode" for s in slots),
         "4 slots: request 1 was still decoding after request 2", slots)
    C.ok(got[1] >= n_sys, "4 slots: request 2 reuses the %d-token system turn" % n_sys, got)
    C.ok(got[0] == ref[0], "4 slots: answer equals the uncached one", (got, ref))
    C.ok((metric(d.port, "deltad_prompt_cache_slot_copies_total") or 0) >= 1,
         "4 slots: the prefix was copied between slots")
    C.ok(d.stop() == 0, "4 slots: clean exit")


def case_ram():
    """One slot: system prompt A, then B (A's checkpoints go to RAM), then A again from RAM."""
    d = Daemon(B, model("tiny-qwen35.gguf"), ["--slots", "1", "--ctx", "4096"],
               name="pcache-ram").start()
    bias = eog_bias(d.port)
    a, b = system_text(42, 4), system_text(45, 5)
    n_a = sys_tokens(d.port, a)
    ref = chat(d.port, a, QUESTIONS[2], bias, False)
    chat(d.port, a, QUESTIONS[0], bias)
    chat(d.port, b, QUESTIONS[0], bias)
    got = chat(d.port, a, QUESTIONS[2], bias)
    C.ok(got[1] >= n_a, "RAM: the evicted system turn comes back (%d tokens)" % n_a, got)
    C.ok(got[0] == ref[0], "RAM: answer equals the uncached one", (got, ref))
    C.ok((metric(d.port, "deltad_prompt_cache_hit_tokens_total", "ram") or 0) >= n_a,
         "RAM: the hit is counted under tier ram")
    C.ok(d.stop() == 0, "RAM: clean exit")
    # a RAM tier smaller than two saved prefixes: LRU evictions keep it within its bytes
    lim = 1500000
    d = Daemon(B, model("tiny-qwen35.gguf"), ["--slots", "1", "--ctx", "4096", "--cache_ram_max",
                                              str(lim)], name="pcache-ram-small").start()
    for k in range(4):
        chat(d.port, system_text(42, 10 + k), QUESTIONS[0], bias)
    ram = metric(d.port, "deltad_prompt_cache_ram_bytes")
    ev = metric(d.port, "deltad_prompt_cache_evictions_total")
    C.ok(ram is not None and 0 < ram <= lim and ev and ev >= 1,
         "RAM: cache_ram_max %d holds (bytes %s, evictions %s)" % (lim, ram, ev))
    C.ok(d.stop() == 0, "RAM small: clean exit")


def wait_metric(port, name, at_least, label=None):
    """The metric once it reaches at_least (disk writes are made by a writer thread: the counter
    follows the requests shortly), or its last value after 60 s (a hang guard, not a timing)."""
    v = None
    for _ in range(600):
        v = metric(port, name, label)
        if v is not None and v >= at_least:
            break
        time.sleep(0.1)
    return v


def dead_pid():
    """A process id no process has now."""
    for pid in range(4194303, 1000, -1):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return pid
        except OSError:
            pass
    return None


def warnings(d, path):
    return len([l for l in d.log_text().splitlines() if "ignoring " + path in l])


def case_disk():
    tmp = tempfile.mkdtemp(prefix="deltad-pcache-")
    cdir = os.path.join(tmp, "cache")
    try:
        args = ["--slots", "1", "--ctx", "4096", "--cache_dir", cdir]
        system = system_text(42, 6)
        d = Daemon(B, model("tiny-qwen35.gguf"), args, name="pcache-disk1").start()
        bias = eog_bias(d.port)
        n_sys = sys_tokens(d.port, system)
        chat(d.port, system, QUESTIONS[0], bias)
        C.ok(d.stop() == 0, "disk: clean exit")
        files = sorted(glob.glob(os.path.join(cdir, "*.dpc")))
        C.ok(len(files) >= 1 and not glob.glob(os.path.join(cdir, "*.tmp")),
             "disk: checkpoints written at shutdown, no temporary files left", files)
        # the half-written files of a killed daemon: deleted at start-up; a live one's: kept
        stale = os.path.join(cdir, "00000000000000aa.dpc.%d.tmp" % dead_pid())
        live = os.path.join(cdir, "00000000000000bb.dpc.%d.tmp" % os.getpid())
        for f in (stale, live):
            with open(f, "wb") as fh:
                fh.write(b"half a file")
        d = Daemon(B, model("tiny-qwen35.gguf"), args, name="pcache-disk2").start()
        C.ok(not os.path.exists(stale) and os.path.exists(live),
             "disk: a dead daemon's temporary file deleted at start-up, a live one's kept")
        os.unlink(live)
        got = chat(d.port, system, QUESTIONS[1], bias)
        ref = chat(d.port, system, QUESTIONS[1], bias, False)
        C.ok(got[1] >= n_sys, "disk: the restarted daemon serves the system turn from disk "
             "(%d tokens)" % n_sys, got)
        C.ok(got[0] == ref[0], "disk: answer equals the uncached one", (got, ref))
        C.ok((metric(d.port, "deltad_prompt_cache_hit_tokens_total", "disk") or 0) >= n_sys,
             "disk: the hit is counted under tier disk")
        C.ok(d.stop() == 0, "disk: clean exit")
        # damage: flip a byte in the body of every file; add a garbage file
        for f in files:
            with open(f, "r+b") as fh:
                fh.seek(-5, os.SEEK_END)
                c = fh.read(1)
                fh.seek(-5, os.SEEK_END)
                fh.write(bytes([c[0] ^ 0x55]))
        junk = os.path.join(cdir, "0123456789abcdef.dpc")
        with open(junk, "wb") as fh:
            fh.write(b"not a cache file" * 10)
        d = Daemon(B, model("tiny-qwen35.gguf"), args, name="pcache-disk3").start()
        got = chat(d.port, system, QUESTIONS[2], bias)
        ref = chat(d.port, system, QUESTIONS[2], bias, False)
        C.ok(got[0] is not None and got[0] == ref[0],
             "damaged file: answered, equal to the uncached answer", (got, ref))
        C.ok(got[1] == 0, "damaged file: nothing served from it", got)
        C.ok(warnings(d, junk) == 1, "garbage file: one warning")
        w = [warnings(d, f) for f in files]
        C.ok(sum(w) >= 1 and max(w) == 1, "damaged files: the one read gets one warning", w)
        C.ok(d.stop() == 0, "damaged: clean exit")
        # another model's files in the same directory
        d = Daemon(B, model("tiny-qwen35.gguf"), args, name="pcache-disk4").start()
        chat(d.port, system, QUESTIONS[3], bias)
        d.stop()
        ours = sorted(glob.glob(os.path.join(cdir, "*.dpc")))
        d = Daemon(B, model("tiny-qwen35-q8_0.gguf"), args, name="pcache-disk5").start()
        got = chat(d.port, system, QUESTIONS[1], bias)
        ref = chat(d.port, system, QUESTIONS[1], bias, False)
        good = [f for f in ours if f != junk]
        C.ok(got[1] == 0 and got[0] == ref[0], "foreign files: not used, answer right",
             (got, ref))
        C.ok(good and all(warnings(d, f) == 1 for f in good),
             "foreign files: one warning each")
        C.ok(d.stop() == 0, "foreign: clean exit")
        # writes that fail (the directory vanished, as a full disk would refuse them): one
        # warning, counted, and serving goes on from RAM
        shutil.rmtree(cdir)
        d = Daemon(B, model("tiny-qwen35.gguf"), args, name="pcache-disk6").start()
        shutil.rmtree(cdir)
        a, b = system_text(42, 30), system_text(42, 31)
        ref = chat(d.port, a, QUESTIONS[0], bias, False)
        chat(d.port, b, QUESTIONS[0], bias)
        chat(d.port, a, QUESTIONS[1], bias)
        chat(d.port, b, QUESTIONS[1], bias)
        got = chat(d.port, a, QUESTIONS[0], bias)
        errs = wait_metric(d.port, "deltad_prompt_cache_disk_write_errors_total", 2)
        C.ok(errs and errs >= 2, "failed writes are counted", errs)
        C.ok(len([l for l in d.log_text().splitlines() if "cannot write" in l]) == 1,
             "failed writes: one warning line")
        C.ok(got[1] >= sys_tokens(d.port, a) and got[0] == ref[0],
             "failed writes: served on from RAM, answer right", (got, ref))
        C.ok(d.stop() == 0, "failed writes: clean exit")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def dir_bytes(cdir):
    return sum(os.path.getsize(f) for f in glob.glob(os.path.join(cdir, "*.dpc")))


def case_disk_max():
    """cache_disk_max: four system prompts' checkpoints in a directory with room for about two
    files; the total stays within it, and the newest prompt comes back from disk."""
    tmp = tempfile.mkdtemp(prefix="deltad-pcache-max-")
    cdir = os.path.join(tmp, "cache")
    try:
        args = ["--slots", "1", "--ctx", "4096", "--cache_dir", cdir]
        d = Daemon(B, model("tiny-qwen35.gguf"), args, name="pcache-max1").start()
        bias = eog_bias(d.port)
        chat(d.port, system_text(42, 40), QUESTIONS[0], bias)
        d.stop()
        one = max(os.path.getsize(f) for f in glob.glob(os.path.join(cdir, "*.dpc")))
        shutil.rmtree(cdir)
        lim = one * 5 // 2
        args += ["--cache_disk_max", str(lim)]
        d = Daemon(B, model("tiny-qwen35.gguf"), args, name="pcache-max2").start()
        for k in range(4):
            chat(d.port, system_text(42, 41 + k), QUESTIONS[k], bias)
        ev = wait_metric(d.port, "deltad_prompt_cache_disk_evictions_total", 1)
        C.ok(d.stop() == 0, "cache_disk_max: clean exit")
        C.ok(ev and ev >= 1, "cache_disk_max: files deleted to stay within it", ev)
        C.ok(0 < dir_bytes(cdir) <= lim, "cache_disk_max %d holds: %d bytes in %d files" %
             (lim, dir_bytes(cdir), len(glob.glob(os.path.join(cdir, "*.dpc")))))
        d = Daemon(B, model("tiny-qwen35.gguf"), args, name="pcache-max3").start()
        system = system_text(42, 44)
        got = chat(d.port, system, QUESTIONS[1], bias)
        ref = chat(d.port, system, QUESTIONS[1], bias, False)
        C.ok(got[1] >= sys_tokens(d.port, system) and got[0] == ref[0],
             "cache_disk_max: the newest system prompt comes back from disk", (got, ref))
        C.ok(d.stop() == 0, "cache_disk_max: clean exit after the restart")
        C.ok(dir_bytes(cdir) <= lim, "cache_disk_max holds after the restart", dir_bytes(cdir))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def case_tp():
    """Two CPU devices (tensor parallel: every device saves its shard): the shared prompt, and
    a prefix back from RAM."""
    d = Daemon(B, model("tiny-qwen35.gguf"), ["--slots", "1", "--ctx", "4096", "--devices",
                                              "cpu:2"], name="pcache-tp").start()
    shared_prompt(C, d, "cpu:2", system_text(42, 20), ((0.0, None),))
    bias = eog_bias(d.port)
    a, b = system_text(42, 21), system_text(42, 22)
    ref = chat(d.port, a, QUESTIONS[3], bias, False)
    chat(d.port, b, QUESTIONS[0], bias)
    got = chat(d.port, a, QUESTIONS[3], bias)
    C.ok(got[1] >= sys_tokens(d.port, a) and got[0] == ref[0],
         "cpu:2: prefix back from RAM, answer equals the uncached one", (got, ref))
    C.ok(d.stop() == 0, "cpu:2: clean exit")


def main():
    case_archs()
    case_tp()
    case_slots()
    case_ram()
    case_disk()
    case_disk_max()
    return C.finish()


run_main(main, C)
