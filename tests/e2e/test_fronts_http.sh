#!/usr/bin/env bash
# test_fronts_http.sh BUILD_DIR — /v1/responses and /v1/messages at the HTTP level (issue 32):
# event and object shapes, the response store, errors in each API's shape (fronts_http.py,
# python3 standard library).
set -u
B=${1:?usage: test_fronts_http.sh BUILD_DIR}
. "$(dirname "$0")/lib.sh"
e2e_need_build "$B"
e2e_need_cmds python3
mkdir -p "$B/test-logs"
exec timeout 600 python3 "$(dirname "$0")/fronts_http.py" "$B"
