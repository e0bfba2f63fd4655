#!/usr/bin/env bash
# test_serve_ops.sh BUILD_DIR — operating `deltad serve` on 127.0.0.1 (issue 4, operations):
#   - bad config values, unknown keys and bad environment values stop start-up with exit 2 and
#     a message naming the key plus a HINT line; a missing model exits 1 naming the file, and
#     caches larger than cache_mem_max exit 1 with the sizes of their parts;
#   - `serve --help` lists the keys; DELTAD_<KEY> overrides the config file;
#   - sd_notify over a test NOTIFY_SOCKET (a python datagram listener): STATUS while loading,
#     READY=1 once the model is loaded, WATCHDOG=1 pings with WATCHDOG_USEC, STOPPING=1 on
#     SIGTERM; /health answers 503 before ready when the load is slow enough to see it;
#   - SIGHUP keeps serving; SIGTERM drains: a streaming request in flight completes with
#     [DONE], new requests and /health get 503, exit status 0; past drain_timeout the rest is
#     cancelled (an error event) and the exit status is still 0; a second SIGINT exits at once.
set -u
B=${1:?usage: test_serve_ops.sh BUILD_DIR}
. "$(dirname "$0")/lib.sh"
D=$B/deltad
M=$B/models/tiny-qwen35.gguf
e2e_need_build "$B"
e2e_need_cmds curl python3 timeout
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
pass=0 fail=0 notes=()
ok() { pass=$((pass+1)); }
bad() { fail=$((fail+1)); echo "FAIL: $*"; }
# expect CODE NEEDLE CMD...: exit status CODE and NEEDLE in stdout+stderr
expect() {
  local code=$1 needle=$2; shift 2
  timeout 30 "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [ "$rc" -eq "$code" ] && grep -qF -- "$needle" "$tmp/out"; then ok
  else bad "$* -> exit $rc (want $code), needle '$needle'"; sed 's/^/  | /' "$tmp/out" | head -8; fi
}
# http_code PORT PATH [curl args...]: prints the status (000 when nothing answered)
http_code() {
  local port=$1 path=$2; shift 2
  curl -s -o /dev/null -w '%{http_code}' --max-time 10 "$@" "http://127.0.0.1:$port$path"
}
# wait_for FILE PATTERN SECONDS: until grep finds PATTERN in FILE
wait_for() {
  local i
  for ((i = 0; i < $3 * 20; i++)); do grep -q -- "$2" "$1" 2>/dev/null && return 0; sleep 0.05; done
  return 1
}
# wait_exit PID SECONDS: until the process is gone; sets $rc to its exit status (or 999)
wait_exit() {
  local i
  for ((i = 0; i < $2 * 20; i++)); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$1" 2>/dev/null; then rc=999; kill -9 "$1"; wait "$1" 2>/dev/null; else wait "$1"; rc=$?; fi
}

# ---- start-up errors ----------------------------------------------------------------------
expect 0 "--drain-timeout" "$D" serve --help
expect 2 "command line --port: key 'port': expected an integer in [0, 65535]" "$D" serve --port 99999
expect 2 "HINT:" "$D" serve --port 99999
printf 'port = 8080\nbogus_key = 1\n' >"$tmp/bad.conf"
expect 2 "$tmp/bad.conf:2: key 'bogus_key': unknown key" "$D" serve --config "$tmp/bad.conf"
printf 'slots = many\n' >"$tmp/bad2.conf"
expect 2 "$tmp/bad2.conf:1: key 'slots': expected an integer" "$D" serve --config "$tmp/bad2.conf"
expect 2 "cannot open the config file" "$D" serve --config "$tmp/none.conf"
expect 2 "environment DELTAD_SLOTS: key 'slots'" env DELTAD_SLOTS=abc "$D" serve
expect 2 "key 'devices': expected cpu:N" "$D" serve --devices gpu:2
expect 2 "key 'devices': 'cuda:0': this build has no CUDA" "$D" serve --devices cuda:0
expect 2 "key 'max_batch_tokens': 4 is less than slots (8)" "$D" serve --slots 8 --max-batch-tokens 4
expect 2 "key 'log_level': expected one of" "$D" serve --log-level loud
expect 2 "key 'spec_rollback': expected one of snapshot|recompute" "$D" serve --spec-rollback x
# the start-up memory budget: caches that exceed cache_mem_max are refused with the numbers
expect 1 "the caches need 34.0 MiB but cache_mem_max is 1.0 MiB: KV 16.0 MiB (4 slots x 4096 tokens), MTP layer KV 16.0 MiB" \
  "$D" serve --model "$M" --port "$(e2e_free_port)" --threads 1 --cache-mem-max 1M
expect 1 "/nonexistent.gguf" "$D" serve --model /nonexistent.gguf --port "$(e2e_free_port)"
expect 1 "HINT:" "$D" serve --model /nonexistent.gguf --port "$(e2e_free_port)"

# ---- a datagram NOTIFY_SOCKET listener: one line per message, newlines as '|' -------------
sock=$tmp/notify.sock
python3 - "$sock" "$tmp/notify.log" <<'EOF' &
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
with open(sys.argv[2], "a") as f:
    while True:
        f.write(s.recv(4096).decode().replace("\n", "|") + "\n")
        f.flush()
EOF
pids+=($!)
for ((i = 0; i < 100; i++)); do [ -S "$sock" ] && break; sleep 0.05; done
[ -S "$sock" ] || { echo "FAIL: notify listener did not start"; exit 1; }

# ---- daemon 1: env override, notify, watchdog, SIGHUP, SIGTERM drain ------------------------
p_file=$(e2e_free_port)
port=$(e2e_free_port)
cat >"$tmp/d.conf" <<EOF
model = "$M"
port = $p_file
slots = 2
ctx = 4096
threads = 1
log_format = plain
drain_timeout = 120
EOF
NOTIFY_SOCKET=$sock WATCHDOG_USEC=300000 DELTAD_PORT=$port "$D" serve --config "$tmp/d.conf" \
  >"$tmp/d1.log" 2>&1 &
d1=$!
pids+=("$d1")
saw_503=0 code=000
for ((i = 0; i < 600; i++)); do
  code=$(http_code "$port" /health --max-time 1)
  [ "$code" = 503 ] && saw_503=1
  [ "$code" = 200 ] && break
  kill -0 "$d1" 2>/dev/null || break
  sleep 0.05
done
if [ "$code" != 200 ]; then
  bad "daemon did not become healthy (last /health: $code)"; sed 's/^/  | /' "$tmp/d1.log" | tail -20
  echo "test_serve_ops: $pass passed, $fail failed"; exit 1
fi
ok
[ "$saw_503" = 1 ] && ok || notes+=("/health 503 while loading not observable (the model loads too fast)")
wait_for "$tmp/notify.log" "^READY=1|MAINPID=$d1|STATUS=serving" 5 && ok || bad "no READY=1 with MAINPID and STATUS"
ready_line=$(grep -n "^READY=1" "$tmp/notify.log" | head -1 | cut -d: -f1)
load_line=$(grep -n "^STATUS=loading" "$tmp/notify.log" | head -1 | cut -d: -f1)
[ -n "$load_line" ] && [ -n "$ready_line" ] && [ "$load_line" -lt "$ready_line" ] && ok || bad "STATUS=loading did not precede READY=1"
grep -q "config port *= $port (environment DELTAD_PORT)" "$tmp/d1.log" && ok || bad "effective config does not show the env override"
[ "$(http_code "$p_file" /health --max-time 2)" = 000 ] && ok || bad "the config file's port answered despite DELTAD_PORT"
sleep 1
n=$(grep -c "^WATCHDOG=1" "$tmp/notify.log")
[ "$n" -ge 2 ] && ok || bad "only $n WATCHDOG=1 pings in ~1 s with WATCHDOG_USEC=300000"

kill -HUP "$d1"
wait_for "$tmp/d1.log" "SIGHUP" 5 && ok || bad "SIGHUP not logged"
[ "$(http_code "$port" /health)" = 200 ] && ok || bad "not healthy after SIGHUP"

# a long stream: the tiny model's special tokens (264..271, end-of-text among them) are banned
bias='"264":-100,"265":-100,"266":-100,"267":-100,"268":-100,"269":-100,"270":-100,"271":-100'
stream_body() { echo '{"prompt":"Once upon a time","max_tokens":'$1',"temperature":0,"stream":true,"logit_bias":{'$bias'}}'; }
curl -sN --max-time 120 -H 'Content-Type: application/json' -d "$(stream_body 1500)" \
  "http://127.0.0.1:$port/v1/completions" >"$tmp/stream.txt" 2>&1 &
cpid=$!
pids+=("$cpid")
wait_for "$tmp/stream.txt" "^data: " 20 || bad "the stream did not start"
kill -TERM "$d1"
wait_for "$tmp/notify.log" "^STOPPING=1" 5 && ok || bad "no STOPPING=1 after SIGTERM"
c_new=$(http_code "$port" /v1/completions -H 'Content-Type: application/json' -d '{"prompt":"x","max_tokens":2}')
c_health=$(http_code "$port" /health)
if grep -q '^data: \[DONE\]' "$tmp/stream.txt"; then
  notes+=("the stream finished before the drain could be observed; 503-during-drain not checked")
else
  [ "$c_new" = 503 ] && ok || bad "a new request during the drain got $c_new, want 503"
  [ "$c_health" = 503 ] && ok || bad "/health during the drain got $c_health, want 503"
fi
wait "$cpid"
grep -q '^data: \[DONE\]' "$tmp/stream.txt" && ok || { bad "the in-flight stream did not end with [DONE]"; tail -c 300 "$tmp/stream.txt"; }
grep -q '"finish_reason": *"\(length\|stop\)"' "$tmp/stream.txt" && ok || bad "the in-flight stream has no length/stop finish_reason"
wait_exit "$d1" 60
[ "$rc" -eq 0 ] && ok || { bad "daemon exit status $rc after SIGTERM, want 0"; tail -5 "$tmp/d1.log"; }
grep -q "drained in" "$tmp/d1.log" && ok || bad "no drain summary in the log"

# ---- daemon 2: a second SIGINT exits at once --------------------------------------------
port2=$(e2e_free_port)
"$D" serve --model "$M" --port "$port2" --threads 1 --slots 1 --max-batch-tokens 1 \
  --drain-timeout 60 >"$tmp/d2.log" 2>&1 &
d2=$!
pids+=("$d2")
for ((i = 0; i < 600; i++)); do [ "$(http_code "$port2" /health --max-time 1)" = 200 ] && break; sleep 0.05; done
curl -sN --max-time 120 -H 'Content-Type: application/json' -d "$(stream_body 3500)" \
  "http://127.0.0.1:$port2/v1/completions" >"$tmp/stream2.txt" 2>&1 &
pids+=($!)
wait_for "$tmp/stream2.txt" "^data: " 20
kill -INT "$d2"
sleep 0.3
kill -INT "$d2" 2>/dev/null
wait_exit "$d2" 10
if grep -q '^data: \[DONE\]' "$tmp/stream2.txt" && [ "$rc" -eq 0 ]; then
  notes+=("the second stream finished before the second SIGINT; not checked")
else
  [ "$rc" -eq 130 ] && ok || bad "exit status $rc after a second SIGINT, want 130"
fi

# ---- daemon 3: past drain_timeout the rest is cancelled, still exit 0 -----------------------
port3=$(e2e_free_port)
"$D" serve --model "$M" --port "$port3" --threads 1 --slots 1 --max-batch-tokens 1 \
  --drain-timeout 0.5 >"$tmp/d3.log" 2>&1 &
d3=$!
pids+=("$d3")
for ((i = 0; i < 600; i++)); do [ "$(http_code "$port3" /health --max-time 1)" = 200 ] && break; sleep 0.05; done
curl -sN --max-time 120 -H 'Content-Type: application/json' -d "$(stream_body 3500)" \
  "http://127.0.0.1:$port3/v1/completions" >"$tmp/stream3.txt" 2>&1 &
c3=$!
pids+=("$c3")
wait_for "$tmp/stream3.txt" "^data: " 20
kill -TERM "$d3"
wait_exit "$d3" 15
wait "$c3"
if grep -q '"finish_reason":"length"' "$tmp/stream3.txt"; then
  notes+=("the third stream finished within drain_timeout 0.5 s; the cut-off was not checked")
else
  [ "$rc" -eq 0 ] && ok || bad "exit status $rc after a drain past its deadline, want 0"
  grep -q '^data: {"error"' "$tmp/stream3.txt" && ok || bad "the stream cut at the drain deadline has no error event"
fi

for n in "${notes[@]}"; do echo "note: $n"; done
echo "test_serve_ops: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
