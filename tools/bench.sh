#!/usr/bin/env bash
# tools/bench.sh BUILD_DIR — `make bench`: synthetic models of ~1 GB, deltad bench with 1 and 2
# threads, medians of 5 runs. Models are generated once into BUILD_DIR/bench-models.
set -eu
B=${1:?usage: tools/bench.sh BUILD_DIR}
M=$B/bench-models
mkdir -p "$M"
gen() { # gen NAME ARGS...
  local f=$M/$1.gguf; shift
  [ -f "$f" ] || "$B/tools/mkmodel" "$@" -o "$f" >&2
  echo "$f"
}
q8=$(gen qwen35-1g-q8_0 --arch qwen35 --preset 1g --type q8_0)
q4k=$(gen qwen35-1g-q4_k --arch qwen35 --preset 1g --type q4_k)
moe=$(gen qwen35moe-1g-q8_0 --arch qwen35moe --preset moe-1g --type q8_0)
for model in "$q8" "$q4k" "$moe"; do
  for t in 1 2; do
    for depth in 128 ${BENCH_DEEP:+4096}; do
      echo "== $(basename "$model") threads=$t depth=$depth"
      "$B/deltad" bench -m "$model" -t "$t" -p "${BENCH_PROMPT:-512}" -n "${BENCH_GEN:-32}" \
        -d "$depth" -r "${BENCH_REPS:-5}"
    done
  done
done
