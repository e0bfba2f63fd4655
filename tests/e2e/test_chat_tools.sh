#!/usr/bin/env bash
# test_chat_tools.sh BUILD_DIR — tool calls and reasoning end to end with the official `openai` npm
# package (node/chat_tools.mjs): deltad serves the tiny model with the Qwen3.5 chat template
# (chat_template_file) and the test-only debug_allow_forced_output, so each request fixes the
# assistant text and the daemon's template rendering, reasoning split, tool-call parsing and
# streaming are what is checked. Skips without node, the openai package or ../shared templates.
set -u
B=${1:?usage: test_chat_tools.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
M=$B/models/tiny-qwen35.gguf
T=$here/../../../shared/data/templates/Qwen3.5-4B.jinja
[ -x "$B/deltad" ] || { echo "SKIP: $B/deltad not built"; exit 77; }
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
"$B/deltad" serve --model "$M" --host 127.0.0.1 --port "$port" --slots 2 --ctx 2048 \
  --chat-template-file "$T" --debug-allow-forced-output true >"$log" 2>&1 &
pid=$!
trap 'kill -9 $pid 2>/dev/null' EXIT
for _ in $(seq 1 600); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && break
  kill -0 $pid 2>/dev/null || { echo "FAIL: deltad exited at start-up"; tail -5 "$log"; exit 1; }
  sleep 0.05
done
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
kill -TERM $pid
for _ in $(seq 1 400); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
wait $pid
stop=$?
[ $stop -eq 0 ] || { echo "FAIL: deltad exit status $stop after SIGTERM"; rc=1; }
echo "test_chat_tools: node checks exit $rc, daemon exit $stop"
exit $rc
