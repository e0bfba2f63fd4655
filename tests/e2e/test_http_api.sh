#!/usr/bin/env bash
# test_http_api.sh BUILD_DIR — the HTTP front end and the OpenAI API of `deltad serve` end to end
# (issue 4): every endpoint and error, validation cases, SSE framing, stop strings, logprobs,
# n, determinism under load, parallel streams, cancellation, queue-full backpressure, auth, CORS
# and a slowloris client. The checks are in http_api.py (python3 standard library + curl).
set -u
B=${1:?usage: test_http_api.sh BUILD_DIR}
. "$(dirname "$0")/lib.sh"
e2e_need_build "$B"
e2e_need_cmds curl python3
mkdir -p "$B/test-logs"
exec timeout 600 python3 "$(dirname "$0")/http_api.py" "$B"
