# lib.sh — sourced by the end-to-end shell tests (not a test itself: tests/run.sh runs only
# test_*.sh). The skip checks they share and one launcher of `deltad serve` for tests that drive
# the daemon from another client (node): start on 127.0.0.1 with a free port, wait for /health,
# stop with SIGTERM and collect the exit status. The Python tests launch through harness.py.
#
# Every skip prints "SKIP: reason" and exits 77, as tests/run.sh expects.

E2E_MODEL_NAME=tiny-qwen35.gguf

# e2e_need_build B: skip unless B/deltad is built and the tiny model is in B/models.
e2e_need_build() {
  [ -x "$1/deltad" ] || { echo "SKIP: $1/deltad not built"; exit 77; }
  [ -f "$1/models/$E2E_MODEL_NAME" ] ||
    { echo "SKIP: $1/models/$E2E_MODEL_NAME missing"; exit 77; }
}

# e2e_need_cmds CMD...: skip unless every command is installed.
e2e_need_cmds() {
  local t
  for t in "$@"; do
    command -v "$t" >/dev/null 2>&1 || { echo "SKIP: $t not installed"; exit 77; }
  done
}

# e2e_need_openai_node DIR: skip without node or the openai npm package in DIR/node.
e2e_need_openai_node() {
  e2e_need_cmds node
  [ -d "$1/node/node_modules/openai" ] ||
    { echo "SKIP: openai npm package not installed (npm install --prefix tests/e2e/node)"; exit 77; }
}

e2e_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# e2e_start B LOG FLAG...: `deltad serve` of B's tiny model with the flags, output to LOG; sets
# E2E_PORT and E2E_PID (killed at exit if still running) and waits up to 30 s for /health. A
# daemon that exits during start-up fails the test (exit 1) with the end of its log. E2E_BIN
# names another binary to start (default B/deltad), e.g. B/tests/deltad-testhooks.
e2e_start() {
  local b=$1 log=$2
  shift 2
  E2E_PORT=$(e2e_free_port)
  "${E2E_BIN:-$b/deltad}" serve --model "$b/models/$E2E_MODEL_NAME" --host 127.0.0.1 --port "$E2E_PORT" \
    "$@" >"$log" 2>&1 &
  E2E_PID=$!
  trap 'kill -9 $E2E_PID 2>/dev/null' EXIT
  local _
  for _ in $(seq 1 600); do
    [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$E2E_PORT/health")" = 200 ] &&
      break
    kill -0 "$E2E_PID" 2>/dev/null ||
      { echo "FAIL: deltad exited at start-up"; tail -5 "$log"; exit 1; }
    sleep 0.05
  done
}

# e2e_stop: SIGTERM, up to 20 s for the exit; sets E2E_STOP to the exit status.
e2e_stop() {
  kill -TERM "$E2E_PID"
  local _
  for _ in $(seq 1 400); do kill -0 "$E2E_PID" 2>/dev/null || break; sleep 0.05; done
  wait "$E2E_PID"
  E2E_STOP=$?
}
