#!/usr/bin/env bash
# test_http_api.sh BUILD_DIR — the HTTP front end and the OpenAI API of `deltad serve` end to end
# (issue 4): every endpoint and error, validation cases, SSE framing, stop strings, logprobs,
# n, determinism under load, parallel streams, cancellation, queue-full backpressure, auth, CORS
# and a slowloris client. The checks are in http_api.py (python3 standard library + curl).
set -u
B=${1:?usage: test_http_api.sh BUILD_DIR}
[ -x "$B/deltad" ] || { echo "SKIP: $B/deltad not built"; exit 77; }
[ -f "$B/models/tiny-qwen35.gguf" ] || { echo "SKIP: $B/models/tiny-qwen35.gguf missing"; exit 77; }
for t in curl python3; do
  command -v $t >/dev/null 2>&1 || { echo "SKIP: $t not installed"; exit 77; }
done
mkdir -p "$B/test-logs"
exec timeout 600 python3 "$(dirname "$0")/http_api.py" "$B"
