#!/usr/bin/env bash
# test_chat_tools.sh BUILD_DIR — tool calls and reasoning end to end with the official `openai` npm
# package (node/chat_tools.mjs): deltad serves the tiny model with the Qwen3.5 chat template
# (chat_template_file) and the test-only debug_allow_forced_output, so each request fixes the
# assistant text and the daemon's template rendering, reasoning split, tool-call parsing and
# streaming are what is checked. Skips without node, the openai package or ../shared templates.
set -u
B=${1:?usage: test_chat_tools.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
M=$B/models/tiny-qwen35.gguf
T=$here/../../../shared/data/templates/Qwen3.5-4B.jinja
e2e_need_build "$B"
[ -f "$T" ] || { echo "SKIP: $T missing (the shared templates)"; exit 77; }
e2e_need_openai_node "$here"
e2e_need_cmds curl python3
mkdir -p "$B/test-logs"
e2e_start "$B" "$B/test-logs/chat_tools_deltad.log" --slots 2 --ctx 2048 \
  --chat-template-file "$T" --debug-allow-forced-output true
port=$E2E_PORT
timeout 120 node "$here/node/chat_tools.mjs" "http://127.0.0.1:$port/v1" tiny-qwen35
rc=$?
# a template that does not compile is a start-up error naming the file
bad=$(mktemp --suffix=.jinja)
echo '{% if %}' >"$bad"
out=$("$B/deltad" serve --model "$M" --port 0 --chat-template-file "$bad" 2>&1)
brc=$?
rm -f "$bad"
if [ $brc -eq 0 ] || ! grep -q "$bad" <<<"$out"; then
  echo "FAIL: a broken chat template must stop start-up naming the file (exit $brc)"
  echo "$out" | tail -5
  rc=1
fi
e2e_stop
stop=$E2E_STOP
[ $stop -eq 0 ] || { echo "FAIL: deltad exit status $stop after SIGTERM"; rc=1; }
echo "test_chat_tools: node checks exit $rc, daemon exit $stop"
exit $rc
