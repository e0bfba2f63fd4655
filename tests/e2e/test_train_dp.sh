#!/usr/bin/env bash
# test_train_dp.sh — tools/train/train.py --procs (data-parallel ranks):
#  1. the ranks' shares of loss_fn add up to the whole batch's loss and gradient (float64, a
#     random model on random batches with the real weighting, 1e-10), MTP rows included;
#  2. a 3-step run with --procs 2 meets through its rendezvous file, writes one model that the
#     reference loader reads, and records procs 2 in train.json, leaving no rendezvous behind.
# Skips (77) without Debian's /usr/bin/python3 with torch (make test does not need it).
set -u
cd "$(dirname "$0")/../.." || exit 1
PY=/usr/bin/python3
"$PY" -c 'import torch, numpy' 2>/dev/null || { echo "SKIP: $PY lacks torch/numpy"; exit 77; }
fail=0
"$PY" - <<'PYEOF' || fail=1
import sys
import torch
sys.path[:0] = ["tools/train", "tools/reference"]
import train
from qwen35 import Config, Qwen35

torch.manual_seed(3)
c = Config(n_vocab=300, E=64, n_ff=128, H=2, Hkv=1, D=32, R=8)
m = Qwen35(c)
m.init_weights(3, 2, 2, 0)
m = m.double()
worst = 0.0
for B, T, mtp_rows in ((5, 40, 0.5), (8, 17, 0.25), (3, 70, 1.0), (6, 9, 0.5)):
    tok = torch.randint(0, c.n_vocab, (B, T))
    wt = (torch.rand(B, T) < 0.4).double() * torch.randint(1, 5, (B, T)).double()
    wt[0] = 0.0                         # a row without targets (the MTP prefix moves past it)
    lens = torch.randint(T // 2, T + 1, (B,))
    for r in range(B):                  # ragged rows: padding after each row's length
        wt[r, lens[r]:] = 0.0
    m.zero_grad()
    a, b = train.loss_fn(m, tok, wt, mtp_rows)
    (a + 0.3 * b).backward()
    want = [p.grad.clone() for p in m.parameters()]
    for ranks in (2, 3):
        got = [torch.zeros_like(p) for p in m.parameters()]
        la = lb = 0.0
        for rank in range(ranks):
            m.zero_grad()
            a2, b2 = train.loss_fn(m, tok, wt, mtp_rows, 1.0, rank, ranks)
            (a2 + 0.3 * b2).backward()
            la, lb = la + a2.item(), lb + b2.item()
            for g, p in zip(got, m.parameters()):
                if p.grad is not None:
                    g += p.grad
        worst = max(worst, abs(la - a.item()) / a.item(), abs(lb - b.item()) / b.item())
        for g, w in zip(got, want):
            worst = max(worst, ((g - w).abs().max() / (w.abs().max() + 1e-300)).item())
if worst > 1e-10:
    sys.exit(f"FAIL: rank shares differ from the whole batch: worst relative error {worst:.2e}")
print(f"ok: rank shares add up to the whole batch's loss and gradient (worst {worst:.1e})")
PYEOF
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if ! out=$("$PY" tools/train/train.py --procs 2 --steps 3 --budget 512 --work "$tmp" \
           --out "$tmp/m.gguf" 2>&1); then
  echo "FAIL: train.py --procs 2 --steps 3: $out"; fail=1
elif ! "$PY" - "$tmp" <<'PYEOF'; then
import json, os, sys
import torch
sys.path[:0] = ["tools/train", "tools/reference"]
import qwen35
d = sys.argv[1]
meta = json.load(open(os.path.join(d, "train.json")))
assert meta["procs"] == 2 and meta["steps"] == 3, meta
model, _ = qwen35.load_gguf(os.path.join(d, "m.gguf"))
assert all(torch.isfinite(p).all() for p in model.parameters())
left = [f for f in os.listdir(d) if f.startswith("rendezvous")]
assert not left, left
print("ok: --procs 2 trained 3 steps and wrote a loadable model")
PYEOF
  fail=1
fi
exit "$fail"
