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
M=$B/models/tiny-qwen35.gguf
T=$here/../../../shared/data/templates/Qwen3.5-4B.jinja
[ -x "$B/deltad" ] || { echo "SKIP: $B/deltad not built"; exit 77; }
H=$B/tests/deltad-testhooks
[ -x "$H" ] || { echo "SKIP: $H not built"; exit 77; }
[ -f "$M" ] || { echo "SKIP: $M missing"; exit 77; }
[ -f "$T" ] || { echo "SKIP: $T missing (the shared templates)"; exit 77; }
command -v node >/dev/null 2>&1 || { echo "SKIP: node not installed"; exit 77; }
[ -d "$here/node/node_modules/openai" ] ||
  { echo "SKIP: openai npm package not installed (npm install --prefix tests/e2e/node)"; exit 77; }
for t in curl python3; do
  command -v $t >/dev/null 2>&1 || { echo "SKIP: $t not installed"; exit 77; }
done
mkdir -p "$B/test-logs"
log=$B/test-logs/chat_tools_deltad.log
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
DELTAD_TEST_FORCED_OUTPUT=1 "$H" serve --model "$M" --host 127.0.0.1 --port "$port" --slots 2 \
  --ctx 2048 --chat-template-file "$T" >"$log" 2>&1 &
pid=$!
trap 'kill -9 $pid 2>/dev/null' EXIT
for _ in $(seq 1 600); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && break
  kill -0 $pid 2>/dev/null || { echo "FAIL: deltad exited at start-up"; tail -5 "$log"; exit 1; }
  sleep 0.05
done
timeout 120 node "$here/node/chat_tools.mjs" "http://127.0.0.1:$port/v1" tiny-qwen35
rc=$?
kill -TERM $pid
for _ in $(seq 1 400); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
wait $pid
stop=$?
[ $stop -eq 0 ] || { echo "FAIL: deltad-testhooks exit status $stop after SIGTERM"; rc=1; }

# the production daemon has no test hook: the field is ignored like any unknown field, so the
# answer is the model's own (the tiny random model's text, never the requested one)
log=$B/test-logs/chat_tools_deltad_prod.log
"$B/deltad" serve --model "$M" --host 127.0.0.1 --port "$port" --slots 2 --ctx 2048 \
  --chat-template-file "$T" >"$log" 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && break
  kill -0 $pid 2>/dev/null || { echo "FAIL: deltad exited at start-up"; tail -5 "$log"; exit 1; }
  sleep 0.05
done
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
kill -TERM $pid
for _ in $(seq 1 400); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
wait $pid
stop=$?
[ $stop -eq 0 ] || { echo "FAIL: deltad exit status $stop after SIGTERM"; rc=1; }
echo "test_chat_tools: exit $rc, daemon exit $stop"
exit $rc
