#!/usr/bin/env bash
# tools/bench_memory.sh BUILD_DIR — `make bench`, last: memory over a long run of the daemon as
# shipped (its own malloc settings, the demo model): tools/loadtest.py with 64 clients for
# BENCH_MEM_SECONDS (600) of mixed traffic, printing RssAnon every ~1/12 of the run and the
# growth from the post-warm-up value. A leak shows as a steady slope; allocator caching levels
# off. Not a test: the figure goes to README ("Reliability and security checks").
set -euo pipefail
B=${1:?usage: tools/bench_memory.sh BUILD_DIR}
cd "$(dirname "$0")/.."
model=models/demo.gguf
[ -f "$model" ] || model=$B/models/tiny-qwen35.gguf
secs=${BENCH_MEM_SECONDS:-600}
echo "== memory: $model, 64 clients x $secs s (tools/loadtest.py)"
python3 tools/loadtest.py --build "$B" --model "$model" -c 64 -t "$secs" |
  grep -E "^(loadtest|RssAnon during|check: RSS|check: every)"
