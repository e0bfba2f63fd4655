#!/usr/bin/env bash
# test_chat_tools.sh BUILD_DIR — tool calls and reasoning end to end with the official `openai` npm
# package (node/chat_tools.mjs): the test-hook build of deltad (BUILD_DIR/tests/deltad-testhooks,
# DELTAD_TEST_FORCED_OUTPUT=1; docs/chat-templates.md "Test-only: forced output") serves the
# tiny model with the Qwen3.5 chat template (chat_template_file), so each request fixes the
# assistant text and the daemon's template rendering, reasoning split, tool-call parsing and
# streaming are what is checked. Then the production deltad must ignore that request field like
# any unknown field. Skips without node, the openai package or ../shared templates.
set -u
B=${1:?usage: test_chat_tools.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/lib.sh"
M=$B/models/tiny-qwen35.gguf
T=$here/../../../shared/data/templates/Qwen3.5-4B.jinja
e2e_need_build "$B"
H=$B/tests/deltad-testhooks
[ -x "$H" ] || { echo "SKIP: $H not built"; exit 77; }
[ -f "$T" ] || { echo "SKIP: $T missing (the shared templates)"; exit 77; }
e2e_need_openai_node "$here"
e2e_need_cmds curl python3
mkdir -p "$B/test-logs"
E2E_BIN=$H DELTAD_TEST_FORCED_OUTPUT=1 e2e_start "$B" "$B/test-logs/chat_tools_deltad.log" \
  --slots 2 --ctx 2048 --chat-template-file "$T"
port=$E2E_PORT
timeout 120 node "$here/node/chat_tools.mjs" "http://127.0.0.1:$port/v1" tiny-qwen35
rc=$?
e2e_stop
[ $E2E_STOP -eq 0 ] || { echo "FAIL: deltad-testhooks exit status $E2E_STOP after SIGTERM"; rc=1; }

# the production daemon has no test hook: the field is ignored like any unknown field, so the
# answer is the model's own (the tiny random model's text, never the requested one)
e2e_start "$B" "$B/test-logs/chat_tools_deltad_prod.log" --slots 2 --ctx 2048 \
  --chat-template-file "$T"
port=$E2E_PORT
want="FORCED-TEXT-THAT-A-RANDOM-MODEL-NEVER-WRITES"
body=$(curl -s -w '\n%{http_code}' "http://127.0.0.1:$port/v1/chat/completions" -d '{
  "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "temperature": 0,
  "chat_template_kwargs": {"enable_thinking": false}, "debug_forced_output": "'"$want"'"}')
code=$(tail -n1 <<<"$body")
if [ "$code" != 200 ] || grep -q "$want" <<<"$body" ||
  ! python3 -c 'import json,sys; o=json.loads(sys.argv[1]); assert o["usage"]["completion_tokens"] > 0' \
    "$(head -n -1 <<<"$body")"; then
  echo "FAIL: the production deltad must ignore debug_forced_output (got $code)"
  head -c 400 <<<"$body"
  echo
  rc=1
else
  echo "ok: the production deltad ignores debug_forced_output"
fi

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
echo "test_chat_tools: exit $rc, daemon exit $stop"
exit $rc
