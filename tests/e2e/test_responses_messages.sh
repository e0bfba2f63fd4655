#!/usr/bin/env bash
# test_responses_messages.sh BUILD_DIR — /v1/responses and /v1/messages through the official SDKs
# (issue 32): node/responses.mjs with `openai` (v6) and node/messages.mjs with `@anthropic-ai/sdk`,
# against the test-hook build of deltad (BUILD_DIR/tests/deltad-testhooks,
# DELTAD_TEST_FORCED_OUTPUT=1: each request fixes the assistant text) with the Qwen3.5 chat
# template and an API key (the OpenAI client sends Authorization: Bearer, Anthropic's x-api-key).
# Skips without node, the npm packages (npm install --prefix tests/e2e/node) or ../shared templates.
set -u
B=${1:?usage: test_responses_messages.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
T=$here/../../../shared/data/templates/Qwen3.5-4B.jinja
e2e_need_build "$B"
H=$B/tests/deltad-testhooks
[ -x "$H" ] || { echo "SKIP: $H not built"; exit 77; }
[ -f "$T" ] || { echo "SKIP: $T missing (the shared templates)"; exit 77; }
e2e_need_openai_node "$here"
[ -d "$here/node/node_modules/@anthropic-ai/sdk" ] ||
  { echo "SKIP: @anthropic-ai/sdk not installed (npm install --prefix tests/e2e/node)"; exit 77; }
e2e_need_cmds curl
mkdir -p "$B/test-logs"
key=test-key-$$
E2E_BIN=$H DELTAD_TEST_FORCED_OUTPUT=1 e2e_start "$B" "$B/test-logs/responses_messages_deltad.log" \
  --slots 2 --ctx 2048 --chat-template-file "$T" --api-key "$key"
port=$E2E_PORT
rc=0
timeout 120 node "$here/node/responses.mjs" "http://127.0.0.1:$port/v1" "$key" || rc=1
timeout 120 node "$here/node/messages.mjs" "http://127.0.0.1:$port" "$key" || rc=1
e2e_stop
[ $E2E_STOP -eq 0 ] || { echo "FAIL: deltad-testhooks exit status $E2E_STOP after SIGTERM"; rc=1; }
echo "test_responses_messages: exit $rc, daemon exit $E2E_STOP"
exit $rc
