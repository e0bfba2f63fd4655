"""eval_demo.py — quality of the demo model measured through the C engine (build/cpu/deltad run
as a subprocess; PyTorch is not involved).

    /usr/bin/python3 tools/train/eval_demo.py [--model models/demo.gguf]
        [--deltad build/cpu/deltad] [--n 100] [--seed 777] [--json out.json]
        [--tasks tokenizer,repeat,add2,extra,mtp]

Held-out prompts: a generator seed the training never uses (training uses small seeds; the
default here is 777), and for arithmetic only operand pairs that corpus.held_out() reserves, so
no evaluated sum was seen in training. The prompts drawn depend on --seed and --n only, not on
--tasks: the first 100 repeat/copy prompts of --n 400 are those of the default --n 100.

Reported:
- exact match of greedy `deltad generate` answers (whole answer string) on: repeat/copy
  (target >= 95 %), 2-digit addition "What is A + B?" -> "A + B = C" (target >= 90 %), and for
  information 3-digit addition, subtraction, reverse, passage QA, sequences and counting;
  repeat/copy misses are split into those wrong from the first word (the one the answer
  re-spells without the prompt's leading space) and those that go wrong later;
- MTP: `deltad logits --mtp` on held-out dialogues; the share of rows p >= 1 where the MTP
  head's top-1 (from x_p and h_{p-1}) equals the trunk's top-1 at p (both predict x_{p+1}),
  over all rows and over assistant-answer rows (target >= 50 %), and the MTP's top-1 accuracy
  on the true next token;
- tokenizer: `deltad logits -p TEXT` and `--tokens <bpe.py ids>` give identical bytes.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))

import corpus                                  # noqa: E402
from gguf_read import GGUFFile                 # noqa: E402
from make_fixture import tokenizer_from_gguf   # noqa: E402


class Engine:
    def __init__(self, deltad, model, threads):
        self.deltad, self.model, self.threads = deltad, model, str(threads)

    def generate(self, prompt, n=48):
        r = subprocess.run([self.deltad, "generate", "-m", self.model, "-p", prompt, "-n", str(n),
                            "-t", self.threads], capture_output=True, text=True, check=True)
        return r.stdout.rstrip("\n")

    def logits(self, V, tokens=None, prompt=None, mtp=True):
        with tempfile.NamedTemporaryFile(suffix=".f32") as f:
            cmd = [self.deltad, "logits", "-m", self.model, "-o", f.name, "-t", self.threads]
            cmd += ["--tokens", ",".join(map(str, tokens))] if tokens is not None else ["-p", prompt]
            if mtp:
                cmd.append("--mtp")
            subprocess.run(cmd, capture_output=True, check=True)
            raw = open(f.name, "rb").read()
        return raw, np.frombuffer(raw, dtype="<f4").reshape(-1, V)


def exact(engine, pairs, show=2, label="", misses=None):
    """Share of exact answers; the misses' (want, got) go to the list `misses` if given."""
    ok = 0
    fails = []
    for prompt, want in pairs:
        got = engine.generate(corpus.chatml_prompt(prompt))
        if got == want:
            ok += 1
        else:
            if len(fails) < show:
                fails.append((prompt, want, got))
            if misses is not None:
                misses.append((want, got))
    for p, w, g in fails:
        print(f"    miss [{label}] {p!r}: want {w!r} got {g!r}")
    return ok / len(pairs)


def first_word_misses(misses):
    """Misses whose answer already goes wrong in its first word (the one a copy re-spells:
    " word" in the prompt, "word" at the start of the line in the answer)."""
    def head(s):
        return s.split(" ", 1)[0]
    return sum(1 for want, got in misses if head(got) != head(want))


def mtp_agreement(eng, tok, V, dialogues):
    """Rows p >= 1 where the MTP head's top-1 (from x_p and h_{p-1}) equals the trunk's top-1
    at p (both predict x_{p+1}): over all rows, over rows whose next token is part of an
    answer, and the MTP's top-1 accuracy on those answer tokens."""
    agree_all = agree_asst = n_all = n_asst = hit_next = 0
    for segs in dialogues:
        ids, w = corpus.encode_dialogue(tok, segs)
        _, lg = eng.logits(V, tokens=ids)
        n = len(ids)
        trunk, mtp = lg[:n].argmax(-1), lg[n:].argmax(-1)
        for p in range(1, n - 1):
            a = trunk[p] == mtp[p]
            agree_all += a
            n_all += 1
            if w[p + 1]:
                agree_asst += a
                n_asst += 1
                hit_next += mtp[p] == ids[p + 1]
    return {"mtp_agree_all": agree_all / n_all, "mtp_agree_answer": agree_asst / n_asst,
            "mtp_acc_answer": hit_next / n_asst}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="models/demo.gguf")
    ap.add_argument("--deltad", default="build/cpu/deltad")
    ap.add_argument("--n", type=int, default=100, help="prompts per headline task")
    ap.add_argument("--n-extra", type=int, default=40, help="prompts per informational task")
    ap.add_argument("--n-mtp", type=int, default=60, help="held-out dialogues for MTP")
    ap.add_argument("--seed", type=int, default=777)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", default=None)
    ap.add_argument("--tasks", default="all",
                    help="comma list of tokenizer, repeat, add2, extra, mtp (default all); "
                         "the prompts drawn do not depend on it")
    args = ap.parse_args(argv)
    parts = ("tokenizer", "repeat", "add2", "extra", "mtp")
    want = set(parts) if args.tasks == "all" else set(args.tasks.split(","))
    if not want <= set(parts):
        ap.error(f"--tasks: unknown {', '.join(sorted(want - set(parts)))} (know {parts})")
    t0 = time.time()
    g = GGUFFile(args.model)
    tok = tokenizer_from_gguf(g)
    V = tok.n_vocab()
    eng = Engine(args.deltad, args.model, args.threads)
    paras = corpus.natural_paragraphs()
    gen = corpus.Dialogues(corpus.word_list(paras), corpus.sentences(paras), args.seed)
    rng = gen.rng
    res = {}

    # -- tokenizer agreement (engine vs bpe.py)
    texts = [corpus.chatml_prompt(gen.phrase()) for _ in range(6)]
    texts += [rng.choice(paras)[:300] for _ in range(6)]
    texts += ["Tabs\tand  double  spaces,\n\nnew lines;  it's 12:30 -- OK? (yes!) [x] {y}",
              "don't WON'T you'll I'M we've they'd 3.14159 1,000,000 $5 50% a+b=c ...",
              "<|im_start|>user\n  leading spaces and trailing   <|im_end|>\n",
              "caf\u00e9 na\u00efve \u00fcber \u3053\u3093\u306b\u3061\u306f \U0001F600 e\u0301"]
    rep = [gen.repeat() for _ in range(args.n)]
    add2 = []
    while len(add2) < args.n:
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        if corpus.held_out(a, b):
            add2.append(gen.arith_prompt(a, b, "+", "What is {a} + {b}?"))

    def held(op, lo, hi):
        out = []
        while len(out) < args.n_extra:
            a, b = rng.randint(lo, hi), rng.randint(lo, hi)
            if corpus.held_out(a, b) or corpus.held_out(b, a):
                out.append(gen.arith_prompt(a, b, op))
        return out

    extra = {"add3": held("+", 100, 999), "sub2": held("-", 10, 99)}
    for name in ("reverse", "passage", "sequence", "count"):
        extra[name] = [getattr(gen, name)() for _ in range(args.n_extra)]
    dialogues = [gen.dialogue() for _ in range(args.n_mtp)]

    if "tokenizer" in want:
        same = 0
        for t in texts:
            a, _ = eng.logits(V, prompt=t, mtp=False)
            b, _ = eng.logits(V, tokens=tok.encode(t), mtp=False)
            same += a == b
            if a != b:
                print(f"    tokenizer differs on {t[:60]!r}")
        res["tokenizer_agreement"] = same / len(texts)

    # -- headline tasks
    if "repeat" in want:
        misses = []
        res["repeat_exact"] = exact(eng, rep, label="repeat", misses=misses)
        res["repeat_first_word_misses"] = first_word_misses(misses)
        res["repeat_later_misses"] = len(misses) - res["repeat_first_word_misses"]
    if "add2" in want:
        res["add2_exact"] = exact(eng, add2, label="add2")

    # -- informational tasks
    if "extra" in want:
        for name, pairs in extra.items():
            res[name + "_exact"] = exact(eng, pairs, label=name)

    # -- MTP agreement on held-out dialogues
    if "mtp" in want:
        res.update(mtp_agreement(eng, tok, V, dialogues))
    res["eval_seconds"] = time.time() - t0
    for k, v in res.items():
        print(f"{k:26s} {v:.3f}" if isinstance(v, float) else f"{k:26s} {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
