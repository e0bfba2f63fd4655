#!/usr/bin/env bash
# tools/run-default.sh BUILD_DIR — what `make run` does: serve the default model on
# 127.0.0.1:8080 (override with HOST / PORT). The default model is the trained demo model
# models/demo.gguf; a tree without it falls back to the random-weight tiny qwen35 test model,
# whose answers are gibberish by construction.
set -eu
B=${1:?usage: tools/run-default.sh BUILD_DIR}
model=models/demo.gguf
if [ ! -f "$model" ]; then
  mkdir -p "$B/models"
  [ -f "$B/models/tiny-qwen35.gguf" ] || "$B/tools/mkmodel" --tiny-all "$B/models" >/dev/null
  model=$B/models/tiny-qwen35.gguf
  echo "note: models/demo.gguf is missing; serving the random-weight test model $model" >&2
fi
echo "serving $model on http://${HOST:-127.0.0.1}:${PORT:-8080} (Ctrl-C stops)" >&2
exec "$B/deltad" serve --model "$model" --host "${HOST:-127.0.0.1}" --port "${PORT:-8080}"
