"""train.py — build the demo model end to end: corpus -> BPE tokenizer -> qwen35 + MTP training
-> models/demo.gguf (F16 matrices, F32 norms / conv / ssm_a / ssm_dt).

    /usr/bin/python3 tools/train/train.py --out models/demo.gguf --work build/demo-model \
        [--seed 1] [--steps N] [--threads 1] [--mix repeat=30,lines=10,...] [--mtp-rows 0.5]

Everything is a function of --seed and the installed Debian text files (corpus.py). With the
same thread count on the same machine the result is bit-for-bit reproducible.

Loss: cross-entropy of the trunk on the next token plus MTP_WEIGHT x the MTP head's loss on the
same target (the token two ahead of the hidden state it reads), both weighted per token:
assistant answers (and their <|im_end|>) and natural text 1, prompts and template 0.
"""

import argparse
import json
import math
import os
import datetime
import random
import subprocess
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bpe                                   # noqa: E402
import corpus                                # noqa: E402
from qwen35 import Config, Qwen35, write_gguf  # noqa: E402

N_VOCAB = 2048
MTP_WEIGHT = 0.3
NAT_CHUNK = 64           # natural-text training window (tokens)
# The chat template written into the GGUF: ChatML as trained, plus tools the Qwen3 way.
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo_template.jinja"),
          encoding="utf-8") as _f:
    CHATML = _f.read()


RANK = 0                 # data-parallel rank (--procs); only rank 0 logs and writes files


def log(msg):
    if RANK:
        return
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------
# data

def build_tokenizer(nat, dlg, work, space_merges=True, n_vocab=N_VOCAB, twins=False):
    """BPE over the corpus: n_vocab tokens, or with twins that many plus a twin "word" for
    each " word" token (rounded up to a multiple of 8). Returns (tokenizer, twin id pairs)."""
    path = os.path.join(work, "merges.json")
    texts = nat[:6000] + ["".join(t for t, _ in d) for d in dlg[:20000]]
    counts = bpe.count_pieces(texts)
    merges = bpe.train(counts, n_vocab - 256 - len(bpe.SPECIALS), log=log,
                       space_merges=space_merges)
    pairs = []
    if twins:
        merges, pairs = bpe.twin_merges(merges, log=log)
        n_vocab = -(-bpe.Tokenizer(merges).n_vocab() // 8) * 8
    if RANK == 0:
        with open(path, "w") as f:
            json.dump(merges, f)
    tok = bpe.Tokenizer(merges, n_vocab)
    log(f"tokenizer: {len(merges)} merges, {tok.n_vocab()} tokens")
    return tok, [(tok.id[a], tok.id[b]) for a, b in pairs]


def natural_chunks(tok, paras, n_tokens):
    """Concatenate paragraphs ("\\n\\n" between) into NAT_CHUNK-token windows."""
    sep = tok.encode("\n\n")
    out, buf = [], []
    for p in paras:
        buf += tok.encode(p, specials=False) + sep
        while len(buf) >= NAT_CHUNK:
            out.append((buf[:NAT_CHUNK], [1] * NAT_CHUNK))
            buf = buf[NAT_CHUNK:]
        if len(out) * NAT_CHUNK >= n_tokens:
            break
    return out


def make_batches(examples, budget, rng):
    """Group examples of similar length into [B, T] batches with B*T <= budget."""
    idx = list(range(len(examples)))
    rng.shuffle(idx)
    batches = []
    for s in range(0, len(idx), 1024):
        grp = sorted(idx[s:s + 1024], key=lambda i: len(examples[i][0]))
        cur = []
        for i in grp:
            T = max(len(examples[j][0]) for j in cur + [i])
            if cur and T * (len(cur) + 1) > budget:
                batches.append(cur)
                cur = []
            cur.append(i)
        if cur:
            batches.append(cur)
    rng.shuffle(batches)
    return batches


def collate(examples, ids, pad):
    T = max(len(examples[i][0]) for i in ids)
    tok = torch.full((len(ids), T), pad, dtype=torch.long)
    wt = torch.zeros((len(ids), T))
    for r, i in enumerate(ids):
        t, w = examples[i]
        tok[r, :len(t)] = torch.tensor(t)
        wt[r, :len(w)] = torch.tensor(w, dtype=torch.float32)
    return tok, wt


# ---------------------------------------------------------------------------------------------
# training

def weighted_ce(model, hidden, tok, wt, norm=None):
    """Weighted CE of the head on hidden [B, T, E] predicting tok[:, 1:], divided by norm
    (default: these rows' weight sum, a weighted mean). Only rows with a non-zero target weight
    go through the LM head."""
    w = wt[:, 1:]
    sel = w > 0
    wsel = w[sel]
    logits = model.head(hidden[:, :-1][sel]).float()
    loss = (F.cross_entropy(logits, tok[:, 1:][sel], reduction="none") * wsel).sum()
    return loss / (wsel.sum() if norm is None else norm)


def loss_fn(model, tok, wt, mtp_rows=1.0, trunk_grad=1.0, rank=0, ranks=1):
    """Weighted next-token CE of the trunk (all sequences) and of the MTP head (the first
    ceil(mtp_rows x B) sequences of the batch; batches are shuffled, so that is a random
    subset). trunk_grad scales the MTP loss's gradient into the trunk's hidden states (1: the
    full gradient, 0: the MTP block learns on fixed trunk features); values are unchanged.
    With ranks > 1 this is rank's share: its rows rank, rank + ranks, ... with both terms
    divided by the whole batch's weight sums, so that the ranks' losses and gradients add up to
    the whole batch's."""
    B = tok.shape[0]
    b = max(1, math.ceil(mtp_rows * B))
    while b < B and not (wt[:b, 1:] > 0).any():
        b += 1
    norm = norm_mtp = None
    if ranks > 1:
        norm, norm_mtp = wt[:, 1:].sum(), wt[:b, 1:].sum()
        rows = torch.arange(rank, B, ranks)
        b = int((rows < b).sum())             # the MTP rows stay a prefix of this rank's rows
        tok, wt = tok[rows], wt[rows]
        hit = (wt[:, 1:] > 0).nonzero()
        T = int(hit[:, 1].max()) + 2 if len(hit) else 2   # later tokens feed no weighted target
        tok, wt = tok[:, :T], wt[:, :T]
    h = model.trunk(tok)
    l_main = weighted_ce(model, h, tok, wt, norm)
    if b == 0:
        return l_main, h.new_zeros(())
    hb = h[:b]
    if trunk_grad != 1.0:
        hb = hb.detach() + trunk_grad * (hb - hb.detach())
    hm = model.mtp_hidden(tok[:b], hb)
    return l_main, weighted_ce(model, hm, tok[:b], wt[:b], norm_mtp)


def allreduce_grads(params, values):
    """Sum the ranks' gradients (a missing one counts as zeros) and the loss values [n] in one
    collective; returns the summed values."""
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                      for p in params] + [values])
    dist.all_reduce(flat)
    off = 0
    for p in params:
        g = flat[off:off + p.numel()].view_as(p)
        if p.grad is None:
            p.grad = g.clone()
        else:
            p.grad.copy_(g)
        off += p.numel()
    return flat[off:]


def run_ranks(argv, procs, work):
    """--procs N: run this script N times as data-parallel ranks (one BLAS thread each; they
    meet through a file in WORK) and wait. If one fails the others are stopped."""
    os.makedirs(work, exist_ok=True)
    init = os.path.abspath(os.path.join(work, f"rendezvous-{os.getpid()}"))
    if os.path.exists(init):
        os.unlink(init)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    kids = [subprocess.Popen([sys.executable, os.path.abspath(__file__), *argv,
                              "--rank", str(r), "--rendezvous", init], env=env)
            for r in range(procs)]
    rc = 0
    try:
        while kids:
            for k in list(kids):
                if k.poll() is not None:
                    kids.remove(k)
                    if k.returncode and not rc:
                        rc = k.returncode
                        for o in kids:
                            o.terminate()
            time.sleep(0.2)
    finally:
        for k in kids:
            k.kill()
        if os.path.exists(init):
            os.unlink(init)
    return rc


def param_groups(model, wd):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.dim() == 2 and "ssm_conv1d" not in n else no_decay).append(p)
    return [{"params": decay, "weight_decay": wd}, {"params": no_decay, "weight_decay": 0.0}]


def cpu_has_bf16():
    """Native bf16 multiply (avx512_bf16 or AMX-BF16) according to /proc/cpuinfo."""
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((ln.split(":", 1)[1].split() for ln in f if ln.startswith("flags")), [])
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="models/demo.gguf")
    ap.add_argument("--work", default="build/demo-model")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--steps", type=int, default=2400)
    ap.add_argument("--budget", type=int, default=1536, help="tokens per batch incl. padding")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--procs", type=int, default=1,
                    help="data-parallel processes, each with one torch and one BLAS thread and "
                         "its share of every batch (1: one process, BLAS threads from "
                         "OPENBLAS_NUM_THREADS)")
    ap.add_argument("--rank", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--rendezvous", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--n-layer", type=int, default=4)
    ap.add_argument("--n-ff", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=N_VOCAB,
                    help="tokenizer size: 256 bytes + specials + BPE merges (1024 .. 4096)")
    ap.add_argument("--n-embd", type=int, default=Config.E)
    ap.add_argument("--n-head", type=int, default=Config.H, help="attention query heads")
    ap.add_argument("--n-head-kv", type=int, default=Config.Hkv, help="attention KV heads")
    ap.add_argument("--gdn-state", type=int, default=Config.S,
                    help="GDN head size S (ssm.state_size; 32 .. 256, a multiple of 16)")
    ap.add_argument("--gdn-k-heads", type=int, default=Config.Hk,
                    help="GDN key heads Hk (ssm.group_count)")
    ap.add_argument("--gdn-v-heads", type=int, default=Config.Hv,
                    help="GDN value heads Hv (ssm.time_step_rank; a multiple of Hk)")
    ap.add_argument("--interval", type=int, default=2,
                    help="full_attention_interval: layer i is gated attention iff (i+1) %% N == 0 "
                         "(2: layers 1 and 3 of 4; real Qwen3.5 models use 4)")
    ap.add_argument("--rope-base", type=float, default=Config.rope_base,
                    help="rope.freq_base of the attention layers")
    ap.add_argument("--rope-dims", type=int, default=Config.R,
                    help="rotary dims per attention head (even, at most the head dim)")
    ap.add_argument("--nat-frac", type=float, default=0.05, help="share of natural-text tokens")
    ap.add_argument("--induction-heads", type=int, default=2,
                    help="GDN key heads of the first GDN layer (0) started as induction memories")
    ap.add_argument("--bigram-heads", type=int, default=2,
                    help="GDN key heads of the second GDN layer (1 at --interval 4) started as "
                         "bigram-keyed induction memories")
    ap.add_argument("--trigram-heads", type=int, default=0,
                    help="key heads of the third GDN layer (2 at --interval 4) started as "
                         "trigram-keyed induction memories")
    ap.add_argument("--result-weight", type=float, default=3.0,
                    help="loss weight of the result digits of arithmetic answers")
    ap.add_argument("--copy-weight", type=float, default=4.0,
                    help="loss weight of repeat/copy answers (their <|im_end|> keeps 1)")
    ap.add_argument("--first-weight", type=float, default=None,
                    help="loss weight of the first word of a repeat/copy answer (default: "
                         "--copy-weight)")
    ap.add_argument("--mix", default="",
                    help="task weights over the defaults, e.g. 'repeat=32,lines=0' (tasks: %s; "
                         "defaults %s)" % (", ".join(n for n, _ in corpus.Dialogues.TASKS),
                                           ",".join(f"{n}={w}" for n, w in
                                                    corpus.Dialogues.TASKS)))
    ap.add_argument("--mtp-rows", type=float, default=0.5,
                    help="fraction of a batch's sequences the MTP head trains on (its block "
                         "costs a fifth of a step; 1: all)")
    ap.add_argument("--mtp-trunk-grad", type=float, default=1.0,
                    help="scale of the MTP loss's gradient into the trunk (0 .. 1; 0: the MTP "
                         "block trains on the trunk's features without shaping them)")
    ap.add_argument("--hard-copy", type=float, default=0.0,
                    help="fraction of repeat/copy phrases with a word (or a word of the same "
                         "4-letter prefix) that comes back later in the phrase")
    ap.add_argument("--number-copy", type=float, default=0.15,
                    help="fraction of repeat/copy phrases that are a word run with a number "
                         "(version, year range, size, date, id) among the words")
    ap.add_argument("--sentence-frac", type=float, default=0.25,
                    help="fraction of plain repeat/copy phrases cut from natural sentences "
                         "(the rest are word runs; the evaluation draws 0.25)")
    ap.add_argument("--no-space-merges", action="store_true",
                    help="BPE: never merge a leading space into a word (copying a phrase's "
                         "first word then needs no re-spelling)")
    ap.add_argument("--twins", action="store_true",
                    help="BPE: give every \" word\" token a twin \"word\" (the spelling at a "
                         "line start or after a quote), and train each pair's embedding and "
                         "LM-head rows as own + shared rows (exported summed)")
    ap.add_argument("--tie-embeddings", action="store_true",
                    help="LM head = token_embd (no output.weight), so copying a token needs no "
                         "separately learned output row for it")
    ap.add_argument("--precision", choices=["auto", "bf16", "f32"], default="auto",
                    help="autocast: bf16 where the CPU multiplies bf16 natively (avx512_bf16 or "
                         "AMX), else f32 (torch emulates bf16 matmuls ~15x slower there)")
    ap.add_argument("--avg-from", type=float, default=0.0,
                    help="write the mean of the weights over the steps after this fraction of the "
                         "run (0: off, the last weights); the last weights go to WORK/last.gguf")
    ap.add_argument("--ckpt-every", type=int, default=0,
                    help="also write WORK/ckpt.gguf every N steps (to evaluate a run in flight)")
    args = ap.parse_args(argv)
    try:
        mix = corpus.Dialogues.parse_mix(args.mix)
    except ValueError as e:
        ap.error(f"--mix: {e}")
    if not 0.0 < args.mtp_rows <= 1.0:
        ap.error(f"--mtp-rows {args.mtp_rows}: must be above 0 and at most 1")
    if not 0.0 <= args.mtp_trunk_grad <= 1.0:
        ap.error(f"--mtp-trunk-grad {args.mtp_trunk_grad}: must be 0 .. 1")
    if not 0.0 <= args.hard_copy <= 1.0:
        ap.error(f"--hard-copy {args.hard_copy}: must be 0 .. 1")
    if not 0.0 <= args.number_copy <= 1.0:
        ap.error(f"--number-copy {args.number_copy}: must be 0 .. 1")
    if not 0.0 <= args.sentence_frac <= 1.0:
        ap.error(f"--sentence-frac {args.sentence_frac}: must be 0 .. 1")
    if not 1024 <= args.vocab <= 4096:
        ap.error(f"--vocab {args.vocab}: must be 1024 .. 4096")
    if not (32 <= args.gdn_state <= 256 and args.gdn_state % 16 == 0):
        ap.error(f"--gdn-state {args.gdn_state}: must be a multiple of 16 in 32 .. 256")
    if not (1 <= args.gdn_k_heads <= 16 and 1 <= args.gdn_v_heads <= 32 and
            args.gdn_v_heads % args.gdn_k_heads == 0):
        ap.error(f"--gdn-k-heads {args.gdn_k_heads} / --gdn-v-heads {args.gdn_v_heads}: need "
                 "1 .. 16 key heads and a multiple of them (at most 32) value heads")
    for name in ("induction_heads", "bigram_heads", "trigram_heads"):
        if not 0 <= getattr(args, name) <= args.gdn_k_heads:
            ap.error(f"--{name.replace('_', '-')} must be 0 .. {args.gdn_k_heads} (GDN key heads)")
    if not 2 <= args.interval <= args.n_layer:
        ap.error(f"--interval {args.interval}: must be 2 .. --n-layer ({args.n_layer})")
    if not 0.0 <= args.avg_from < 1.0:
        ap.error(f"--avg-from {args.avg_from}: must be 0 .. below 1")
    if not (0 < args.rope_dims <= Config.D and args.rope_dims % 2 == 0) or not args.rope_base > 1:
        ap.error(f"--rope-dims must be even in 2 .. {Config.D} and --rope-base above 1")
    if not 1 <= args.procs <= 16:
        ap.error(f"--procs {args.procs}: must be 1 .. 16")
    if args.procs > 1 and args.rank is None:
        sys.exit(run_ranks(sys.argv[1:] if argv is None else argv, args.procs, args.work))
    ranks, rank = 1, 0
    if args.rank is not None:
        global RANK
        if not (0 <= args.rank < args.procs and args.rendezvous):
            ap.error("--rank / --rendezvous are set by --procs")
        ranks = args.procs
        rank = RANK = args.rank
        dist.init_process_group("gloo", init_method="file://" + args.rendezvous, rank=rank,
                                world_size=ranks, timeout=datetime.timedelta(minutes=5))
    t_start = time.time()
    torch.set_num_threads(1 if ranks > 1 else args.threads)
    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    os.makedirs(args.work, exist_ok=True)

    paras = corpus.natural_paragraphs(log=log)
    random.Random(args.seed).shuffle(paras)
    words = corpus.word_list(paras)
    sents = corpus.sentences(paras)
    gen = corpus.Dialogues(words, sents, args.seed, args.result_weight, args.copy_weight,
                           args.first_weight, mix, args.hard_copy,
                           args.sentence_frac, args.number_copy)
    n_dlg = args.steps * args.budget // 45 + 1000     # about one pass over fresh dialogues
    dlg = [gen.dialogue() for _ in range(n_dlg)]
    log(f"{len(dlg)} dialogues generated")

    tok, twins = build_tokenizer(paras, dlg, args.work, not args.no_space_merges, args.vocab,
                                 args.twins)
    examples = [corpus.encode_dialogue(tok, d) for d in dlg]
    n_dlg_tok = sum(len(e[0]) for e in examples)
    nat_tokens = int(n_dlg_tok * args.nat_frac / (1 - args.nat_frac))
    examples += natural_chunks(tok, paras[6000:], nat_tokens)
    n_all = sum(len(e[0]) for e in examples)
    log(f"examples: {len(examples)} ({n_dlg_tok} dialogue tokens, {n_all - n_dlg_tok} natural)")

    c = Config(n_vocab=tok.n_vocab(), E=args.n_embd, n_layer=args.n_layer, n_ff=args.n_ff,
               H=args.n_head, Hkv=args.n_head_kv, tied=args.tie_embeddings,
               rope_base=args.rope_base, R=args.rope_dims, interval=args.interval,
               S=args.gdn_state, Hk=args.gdn_k_heads, Hv=args.gdn_v_heads)
    if c.H % c.Hkv:
        ap.error(f"--n-head {c.H} is not a multiple of --n-head-kv {c.Hkv}")
    model = Qwen35(c)
    if twins:
        model.set_twins(twins)
    model.init_weights(args.seed, args.induction_heads, args.bigram_heads,
                       args.trigram_heads)
    n_par = sum(p.numel() for p in model.parameters())
    log(f"model: {n_par / 1e6:.2f} M parameters, config {c}")
    params = list(model.parameters())
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    warm = max(1, args.steps // 20)
    avg_start = int(args.steps * args.avg_from) if args.avg_from > 0 else args.steps
    wavg, n_avg = None, 0

    def lr_at(s):
        if s < warm:
            return args.lr * (s + 1) / warm
        p = (s - warm) / max(1, args.steps - warm)
        return args.lr * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * p)))

    bf16 = args.precision == "bf16" or (args.precision == "auto" and cpu_has_bf16())
    log(f"precision: {'bf16 autocast' if bf16 else 'f32'} ({args.precision})")
    batches = []
    step, t0 = 0, time.time()
    ema = None
    seen = 0
    while step < args.steps:
        if not batches:
            batches = make_batches(examples, args.budget, rng)
        ids = batches.pop()
        rng.shuffle(ids)     # the MTP head trains on the first rows: make them a random subset
        x, w = collate(examples, ids, tok.pad)
        for gparam in opt.param_groups:
            gparam["lr"] = lr_at(step)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            l_main, l_mtp = loss_fn(model, x, w, args.mtp_rows, args.mtp_trunk_grad, rank,
                                    ranks)
            loss = l_main + MTP_WEIGHT * l_mtp
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if ranks > 1:
            cur = tuple(allreduce_grads(params, torch.stack([l_main.detach().float(),
                                                             l_mtp.detach().float()])).tolist())
        else:
            cur = (l_main.item(), l_mtp.item())
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        seen += x.numel()
        ema = cur if ema is None else tuple(0.95 * a + 0.05 * b for a, b in zip(ema, cur))
        step += 1
        if step > avg_start:   # running mean of the weights, one foreach update per step
            n_avg += 1
            with torch.no_grad():
                params = [p.detach() for p in model.parameters()]
                if wavg is None:
                    wavg = [p.clone() for p in params]
                else:
                    torch._foreach_add_(wavg, torch._foreach_sub(params, wavg), alpha=1.0 / n_avg)
        if step % 25 == 0 or step == args.steps:
            el = time.time() - t0
            log(f"step {step}/{args.steps} loss {ema[0]:.3f} mtp {ema[1]:.3f} "
                f"lr {lr_at(step - 1):.2e} {seen / el:.0f} tok/s elapsed {el:.0f}s")
        if args.ckpt_every and step % args.ckpt_every == 0 and step < args.steps and not rank:
            write_gguf(model, tok, os.path.join(args.work, "ckpt.gguf"), chat_template=CHATML)

    if ranks > 1:
        dist.destroy_process_group()
    if rank:
        return
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    if wavg is not None:
        write_gguf(model, tok, os.path.join(args.work, "last.gguf"), chat_template=CHATML)
        with torch.no_grad():
            for p, a in zip(model.parameters(), wavg):
                p.copy_(a)
        log(f"weights: mean of the last {n_avg} steps")
    write_gguf(model, tok, args.out, chat_template=CHATML)
    torch.save(model.state_dict(), os.path.join(args.work, "model.pt"))
    meta = {"seed": args.seed, "steps": args.steps, "budget": args.budget, "lr": args.lr,
            "threads": args.threads, "procs": ranks, "mix": mix, "mtp_rows": args.mtp_rows,
            "mtp_trunk_grad": args.mtp_trunk_grad, "number_copy": args.number_copy,
            "twins": len(twins), "precision": "bf16" if bf16 else "f32", "config": c.__dict__, "params": n_par,
            "train_seconds": time.time() - t0, "total_seconds": time.time() - t_start,
            "cpu_seconds": time.process_time(),
            "tokens_seen": seen, "final_loss": ema,
            "avg_steps": n_avg}
    with open(os.path.join(args.work, "train.json"), "w") as f:
        json.dump(meta, f, indent=1)
    log(f"wrote {args.out} ({os.path.getsize(args.out) / 1e6:.1f} MB); training "
        f"{time.time() - t0:.0f}s, total {time.time() - t_start:.0f}s wall, "
        f"{time.process_time():.0f}s CPU")


if __name__ == "__main__":
    main()
