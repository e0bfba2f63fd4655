#!/usr/bin/env bash
# test_train_twins.sh — tools/train --twins (a twin "word" token for every " word" token):
#  1. bpe.twin_merges keeps the trained merges as a prefix, makes every twin one token while
#     " word" stays one token, and re-encodes a text to the same bytes in no more tokens;
#  2. the model's twin reparametrisation exports its sums: the GGUF's token_embd and output rows
#     are the F16 rounding of own + shared row (both spellings), and the shared row is trained;
#  3. a 3-step train.py --twins run writes a model whose GGUF tokenizer has the twins.
# Skips (77) without Debian's /usr/bin/python3 with torch (make test does not need it).
set -u
cd "$(dirname "$0")/../.." || exit 1
PY=/usr/bin/python3
"$PY" -c 'import torch, numpy' 2>/dev/null || { echo "SKIP: $PY lacks torch/numpy"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
"$PY" - "$tmp" <<'PYEOF' || fail=1
import os, sys
import torch
sys.path[:0] = ["tools/train", "tools/reference"]
import bpe, qwen35
from gguf_read import GGUFFile
from make_fixture import tokenizer_from_gguf

text = open("README.md", encoding="utf-8").read() + open("tools/train/README.md").read()
merges = bpe.train(bpe.count_pieces([text]), 600)
twin, pairs = bpe.twin_merges(merges)
assert twin[:len(merges)] == [tuple(m) for m in merges], "trained merges not kept as a prefix"
old, new = bpe.Tokenizer(merges), bpe.Tokenizer(twin)
sp = bpe.to_unicode(" ")
words = [t for t in old.tokens if t.startswith(sp) and t[1:].isascii() and t[1:].isalpha()
         and len(t) > 2]
assert len(pairs) == len(words) > 100, (len(pairs), len(words))
for t, w in pairs:
    assert t == sp + w, (t, w)
    assert new.encode(bpe.from_unicode(w).decode(), specials=False) == [new.id[w]], w
    assert new.encode(bpe.from_unicode(t).decode(), specials=False) == [new.id[t]], t
a, b = old.encode(text), new.encode(text)
assert new.decode(b) == text and len(b) < len(a), (len(a), len(b))
print(f"ok: {len(pairs)} twins, each one token; the text re-encodes in {len(b)} tokens, "
      f"not {len(a)}")

torch.manual_seed(5)
c = qwen35.Config(n_vocab=new.n_vocab(), E=64, n_ff=128, H=2, Hkv=1, D=32, R=8)
m = qwen35.Qwen35(c)
ids = [(new.id[t], new.id[w]) for t, w in pairs]
m.set_twins(ids)
m.init_weights(5, 2, 2, 0)
tok = torch.randint(0, c.n_vocab, (2, 30))
tok[0, :4] = torch.tensor([ids[0][0], ids[0][1], ids[1][1], ids[1][0]])
lt, lm = m(tok)
(lt.logsumexp(-1).sum() + lm.logsumexp(-1).sum()).backward()
assert m.twin_embd.grad[0].abs().sum() > 0 and m.twin_out.grad.abs().sum() > 0
path = os.path.join(sys.argv[1], "twins.gguf")
qwen35.write_gguf(m, new, path)
g, _ = qwen35.load_gguf(path)
for got, want in ((g.token_embd.weight, m.embed_weight()), (g.output.weight, m.head_weight())):
    want = want.detach().half().double()
    assert torch.equal(got, want), "exported rows are not own + shared"
    for a_, b_ in ids[:50]:        # a pair differs (own rows) but shares its shared row
        assert not torch.equal(want[a_], want[b_])
assert tokenizer_from_gguf(GGUFFile(path)).tokens == new.tokens
print("ok: GGUF rows are own + shared rows; tokenizer round-trips")
PYEOF
if ! out=$("$PY" tools/train/train.py --twins --steps 3 --budget 512 --work "$tmp/run" \
           --out "$tmp/run/m.gguf" 2>&1); then
  echo "FAIL: train.py --twins --steps 3: $out"; fail=1
elif ! "$PY" - "$tmp/run/m.gguf" <<'PYEOF'; then
import sys
sys.path[:0] = ["tools/train", "tools/reference"]
import bpe
from gguf_read import GGUFFile
from make_fixture import tokenizer_from_gguf
tok = tokenizer_from_gguf(GGUFFile(sys.argv[1]))
sp = bpe.to_unicode(" ")
words = [t for t in tok.tokens if t.startswith(sp) and t[1:].isascii() and t[1:].isalpha()
         and len(t) > 2]
missing = [t for t in words if t[1:] not in tok.id]
assert len(words) > 500 and not missing, (len(words), missing[:5])
assert tok.n_vocab() % 8 == 0 and tok.n_vocab() > 2048, tok.n_vocab()
print(f"ok: train.py --twins wrote {tok.n_vocab()} tokens, {len(words)} words with twins")
PYEOF
  fail=1
fi
exit "$fail"
