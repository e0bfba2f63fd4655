#!/usr/bin/env bash
# test_prompt_cache.sh BUILD_DIR — the prompt cache on the hybrid models (issue 36): a shared
# system prompt reused at its message boundary on every hybrid arch, across four slots, from
# RAM after eviction, from disk after a restart, and damaged or foreign cache files ignored
# (checks in prompt_cache.py).
set -u
B=${1:?usage: test_prompt_cache.sh BUILD_DIR}
. "$(dirname "$0")/lib.sh"
e2e_need_build "$B"
for m in tiny-qwen35 tiny-qwen35moe tiny-qwen3next tiny-qwen35-q8_0; do
  [ -f "$B/models/$m.gguf" ] || { echo "SKIP: $B/models/$m.gguf missing"; exit 77; }
done
e2e_need_cmds python3
mkdir -p "$B/test-logs"
exec timeout 600 python3 "$(dirname "$0")/prompt_cache.py" "$B"
