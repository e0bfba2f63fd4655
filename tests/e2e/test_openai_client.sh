#!/usr/bin/env bash
# test_openai_client.sh BUILD_DIR — the official `openai` npm package (v6) against deltad:
# chat, streaming with usage, completions, models, and error classes (node/openai_client.mjs).
# The package is installed by .ci/run into tests/e2e/node/node_modules; without it (or without
# node) the test is skipped.
set -u
B=${1:?usage: test_openai_client.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
e2e_need_build "$B"
e2e_need_openai_node "$here"
e2e_need_cmds curl python3
mkdir -p "$B/test-logs"
key=test-key-$$
e2e_start "$B" "$B/test-logs/openai_client_deltad.log" --slots 2 --ctx 512 --api-key "$key"
port=$E2E_PORT
timeout 120 node "$here/node/openai_client.mjs" "http://127.0.0.1:$port/v1" "$key" tiny-qwen35
rc=$?
e2e_stop
stop=$E2E_STOP
[ $stop -eq 0 ] || { echo "FAIL: deltad exit status $stop after SIGTERM"; rc=1; }
echo "test_openai_client: node checks exit $rc, daemon exit $stop"
exit $rc
