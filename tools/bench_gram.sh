#!/usr/bin/env bash
# tools/bench_gram.sh BUILD_DIR [SCHEMA] — what constrained decoding costs with a real-sized
# vocabulary (issue 31): `deltad bench --schema SCHEMA` (default tools/bench_schema_50.json, 50
# properties of the four scalar types, a third of them required) on a synthetic ~1.3 GB Q8_0
# qwen35 (the 1g preset's layers, random weights) that carries the real 151,936-token Qwen3
# vocabulary and a head tied to token_embd: schema compile time, then decode tok/s unconstrained
# and constrained at batch 1 and 8 (runs interleaved, medians of BENCH_REPS) and the mask time
# per token (mean, p50 / p99 bucket bounds).
#
# The tokenizer GGUF (tools/tok2gguf from ../shared/data/tokenizers/qwen3, padded to 151,936
# ids) and the model (tools/mkmodel --tokenizer ... --head tied) are made once into
# BUILD_DIR/bench-models. Knobs: BENCH_GEN (64 tokens per request), BENCH_REPS (5),
# QWEN3_TOKENIZER (the directory with tokenizer.json and tokenizer_config.json).
set -euo pipefail
B=${1:?usage: tools/bench_gram.sh BUILD_DIR [SCHEMA]}
S=${2:-tools/bench_schema_50.json}
T=${QWEN3_TOKENIZER:-../shared/data/tokenizers/qwen3}
M=$B/bench-models
if [ ! -f "$T/tokenizer.json" ]; then
  echo "bench_gram: $T/tokenizer.json missing (the shared Qwen3 tokenizer); skipped" >&2
  exit 0
fi
mkdir -p "$M"
tok=$M/qwen3-tokenizer.gguf
[ -f "$tok" ] || "$B/tools/tok2gguf" "$T/tokenizer.json" "$T/tokenizer_config.json" -o "$tok" \
  --vocab-size 151936 >&2
model=$M/qwen35-1g-qwen3vocab-q8_0.gguf
[ -f "$model" ] || "$B/tools/mkmodel" --preset 1g --type q8_0 --tokenizer "$tok" --head tied \
  -o "$model" >&2
cat "$model" >/dev/null # into the page cache, read front to back (see bench.sh)
echo "== $(basename "$model") --schema $S"
"$B/deltad" bench -m "$model" --schema "$S" -n "${BENCH_GEN:-64}" -r "${BENCH_REPS:-5}" 2>/dev/null
