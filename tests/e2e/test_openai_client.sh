#!/usr/bin/env bash
# test_openai_client.sh BUILD_DIR — the official `openai` npm package (v6) against deltad:
# chat, streaming with usage, completions, models, and error classes (node/openai_client.mjs).
# The package is installed by .ci/run into tests/e2e/node/node_modules; without it (or without
# node) the test is skipped.
set -u
B=${1:?usage: test_openai_client.sh BUILD_DIR}
here=$(cd "$(dirname "$0")" && pwd)
M=$B/models/tiny-qwen35.gguf
[ -x "$B/deltad" ] || { echo "SKIP: $B/deltad not built"; exit 77; }
[ -f "$M" ] || { echo "SKIP: $M missing"; exit 77; }
command -v node >/dev/null 2>&1 || { echo "SKIP: node not installed"; exit 77; }
[ -d "$here/node/node_modules/openai" ] ||
  { echo "SKIP: openai npm package not installed (npm install --prefix tests/e2e/node)"; exit 77; }
for t in curl python3; do
  command -v $t >/dev/null 2>&1 || { echo "SKIP: $t not installed"; exit 77; }
done
mkdir -p "$B/test-logs"
log=$B/test-logs/openai_client_deltad.log
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
key=test-key-$$
"$B/deltad" serve --model "$M" --host 127.0.0.1 --port "$port" --slots 2 --ctx 512 \
  --api-key "$key" >"$log" 2>&1 &
pid=$!
trap 'kill -9 $pid 2>/dev/null' EXIT
for _ in $(seq 1 600); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health")" = 200 ] && break
  kill -0 $pid 2>/dev/null || { echo "FAIL: deltad exited at start-up"; tail -5 "$log"; exit 1; }
  sleep 0.05
done
timeout 120 node "$here/node/openai_client.mjs" "http://127.0.0.1:$port/v1" "$key" tiny-qwen35
rc=$?
kill -TERM $pid
for _ in $(seq 1 400); do kill -0 $pid 2>/dev/null || break; sleep 0.05; done
wait $pid
stop=$?
[ $stop -eq 0 ] || { echo "FAIL: deltad exit status $stop after SIGTERM"; rc=1; }
echo "test_openai_client: node checks exit $rc, daemon exit $stop"
exit $rc
