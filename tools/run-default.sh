#!/usr/bin/env bash
# tools/run-default.sh BUILD_DIR — what `make run` does.
# Until the daemon lands (issue "The daemon"), this runs `deltad generate` on the default model.
# The trained demo model (issue "A small trained demo model") is models/demo.gguf; until it
# exists we fall back to the random-weight tiny qwen35 test model, whose text is gibberish.
set -eu
B=${1:?usage: tools/run-default.sh BUILD_DIR}
model=models/demo.gguf
if [ ! -f "$model" ]; then
  mkdir -p "$B/models"
  [ -f "$B/models/tiny-qwen35.gguf" ] || "$B/tools/mkmodel" --tiny-all "$B/models" >/dev/null
  model=$B/models/tiny-qwen35.gguf
  echo "note: models/demo.gguf is not there yet; using the random-weight test model $model" >&2
fi
exec "$B/deltad" generate -m "$model" -p "${PROMPT:-The quick brown fox}" -n "${N:-32}"
