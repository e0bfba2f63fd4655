#!/usr/bin/env bash
# test_demo.sh BUILD_DIR — the trained demo model (models/demo.gguf) in the engine against the
# PyTorch implementation (tools/train/qwen35.py, float64 on the same F16 weights):
#   1. trunk and MTP logits of a 2-turn ChatML dialogue, per row max|diff| / max|ref| <= 1e-3
#      and the same argmax on every row (fixture tests/fixtures/demo/logits.bin, see
#      tools/train/make_fixture.py for the format);
#   2. the engine's tokenizer on the dialogue text gives the fixture's token ids (the logits of
#      `-p TEXT` and `--tokens IDS` are byte-identical);
#   3. greedy generation answers "What is 23 + 45?" with "23 + 45 = 68".
# Needs only coreutils and awk. Skips (77) when models/demo.gguf is absent. DEMO_DEVICES (e.g.
# cuda:0, from tests/cuda/test_cuda_forward.sh under kcpu) runs all of it on those devices.
set -u
B=${1:?usage: test_demo.sh BUILD_DIR}
cd "$(dirname "$0")/../.." || exit 1
M=${DEMO_MODEL:-models/demo.gguf}
FXD=${DEMO_FIXTURES:-tests/fixtures/demo}
FX=$FXD/logits.bin
PROMPT=$FXD/prompt.txt
[ -f "$M" ] || { echo "SKIP: $M is absent (make demo-model builds it)"; exit 77; }
[ -f "$FX" ] || { echo "FAIL: $FX missing"; exit 1; }
dev=(--devices "${DEMO_DEVICES:-cpu:1}")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

[ "$(head -c 4 "$FX")" = DDMO ] || { echo "FAIL: $FX: bad magic"; exit 1; }
read -r ver n V <<<"$(od -An -tu4 -j4 -N12 "$FX")"
[ "$ver" = 1 ] || { echo "FAIL: $FX: version $ver"; exit 1; }
want=$(dd if="$FX" bs=1 skip=16 count=64 status=none)
have=$(sha256sum "$M" | cut -d' ' -f1)
if [ "$want" != "$have" ]; then
  echo "FAIL: $FX was made for another $M (sha256 $want, file has $have);"
  echo "      regenerate it: /usr/bin/python3 tools/train/make_fixture.py"
  exit 1
fi
hdr=80
toks=$(od -An -td4 -v -j$hdr -N$((4 * n)) "$FX" | tr -s ' \n' ',' | sed 's/^,//; s/,$//')

"$B/deltad" logits -m "$M" --tokens "$toks" -o "$tmp/eng.f32" --mtp -t 1 "${dev[@]}" >"$tmp/log" 2>&1 ||
  { echo "FAIL: deltad logits"; cat "$tmp/log"; exit 1; }
size=$(stat -c %s "$tmp/eng.f32")
[ "$size" -eq $((2 * n * V * 4)) ] || { echo "FAIL: engine wrote $size bytes, want $((2 * n * V * 4))"; exit 1; }
tail -c +$((hdr + 4 * n + 1)) "$FX" | od -An -tf4 -v -w4 >"$tmp/ref.txt"
od -An -tf4 -v -w4 "$tmp/eng.f32" >"$tmp/eng.txt"
paste "$tmp/ref.txt" "$tmp/eng.txt" | awk -v V="$V" -v n="$n" '
  function abs(x) { return x < 0 ? -x : x }
  {
    r = $1 + 0; e = $2 + 0; i = (NR - 1) % V
    if (i == 0) { md = 0; mr = 0; ar = 0; ae = 0; br = r; be = e }
    d = abs(r - e); if (d > md) md = d; if (abs(r) > mr) mr = abs(r)
    if (r > br) { br = r; ar = i }
    if (e > be) { be = e; ae = i }
    if (i == V - 1) {
      row = int((NR - 1) / V); rel = md / (mr > 0 ? mr : 1)
      if (rel > worst) worst = rel
      if (rel > 1e-3) { bad++; printf "row %d (%s): rel %.3g\n", row % n, row < n ? "trunk" : "mtp", rel }
      if (ar != ae) { bad++; printf "row %d (%s): argmax %d vs %d\n", row % n, row < n ? "trunk" : "mtp", ar, ae }
    }
  }
  END { printf "logits: %d trunk + %d MTP rows x %d, worst per-row relative error %.3g\n", n, n, V, worst; exit bad > 0 }' ||
  { echo "FAIL: logits differ from the PyTorch reference"; fail=1; }

"$B/deltad" logits -m "$M" -p "$(cat "$PROMPT")" -o "$tmp/tok.f32" --mtp -t 1 "${dev[@]}" >"$tmp/log" 2>&1 ||
  { echo "FAIL: deltad logits -p"; cat "$tmp/log"; exit 1; }
if cmp -s "$tmp/tok.f32" "$tmp/eng.f32"; then
  echo "tokenizer: prompt.txt encodes to the fixture's $n ids"
else
  echo "FAIL: the engine tokenizes prompt.txt differently from tools/train/bpe.py"; fail=1
fi

q=$'<|im_start|>user\nWhat is 23 + 45?<|im_end|>\n<|im_start|>assistant\n'
ans=$("$B/deltad" generate -m "$M" -p "$q" -n 16 -t 1 "${dev[@]}" 2>/dev/null)
if [ "$ans" = "23 + 45 = 68" ]; then
  echo "generate: '$ans'"
else
  echo "FAIL: generate answered '$ans', want '23 + 45 = 68'"; fail=1
fi
[ $fail -eq 0 ] && echo "demo model: ok"
exit $fail
