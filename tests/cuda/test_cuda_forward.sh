#!/usr/bin/env bash
# tests/cuda/test_cuda_forward.sh [BUILD_DIR] — the whole forward pass through the CUDA device
# (engine/compute/dev_cuda.c + kernels/cuda), under the kcpu emulator (make KCPU=1, build/kcpu),
# so it runs on a machine without a GPU (issue 30, "proof without a GPU"):
#   1. golden logits of the tiny qwen3, qwen35, qwen35moe and qwen3next models (trunk and MTP)
#      against the NumPy fixtures, at the CPU tolerance (test_golden);
#   2. tensor parallelism over 2, 3 and 4 emulated GPUs joined by the emulated NCCL, against
#      one GPU, uneven slices included (test_tp);
#   3. lossless speculation (n-gram, MTP, both; 1 and 8 slots; greedy and seeded sampling:
#      test_spec's lossless tests, DELTAD_TEST_QUICK: without the rollback-mode variants,
#      which the CPU run covers) and the engine tests (test_eng, prompt cache included);
#   4. the demo model: logits against PyTorch, and "What is 23 + 45?" answered "23 + 45 = 68"
#      (tests/golden/test_demo.sh with DEMO_DEVICES=cuda:0);
#   5. `deltad serve --devices cuda:0` answers the demo question exactly as the CPU build's
#      daemon does, streaming and not.
# Each test program makes its devices with DELTAD_TEST_DEVICE=cuda (tests/unit/testutil.c); the
# models are the calling build's (BUILD_DIR/models, default build/cpu). One fiber order
# (forward) here: tests/cuda/test_kcpu.sh covers the kernels in all three.
# Logs: build/kcpu/test-logs/cuda-forward-*.log.
set -u
B=${1:-build/cpu}
cd "$(dirname "$0")/../.." || exit 1
for tool in g++ python3 curl; do
  command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool not found"; exit 77; }
done
K=build/kcpu
[ -f "$B/models/tiny-qwen35.gguf" ] || { echo "SKIP: $B/models has no tiny models (tests/run.sh makes them)"; exit 77; }
mkdir -p "$K/test-logs"
progs=(test_golden test_tp test_spec test_eng)
start=$(date +%s)
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -j2 KCPU=1 \
    "${progs[@]/#/$K/tests/}" "$K/deltad" >"$K/test-logs/cuda-forward-build.log" 2>&1; then
  echo "FAIL: make KCPU=1"
  tail -n 30 "$K/test-logs/cuda-forward-build.log"
  exit 1
fi
export DELTAD_TEST_DEVICE=cuda KCPU_ORDER=forward
fail=0
run() { # name, then the command
  local name=$1 log="$K/test-logs/cuda-forward-$1.log" t0=$EPOCHREALTIME rc
  shift
  "$@" >"$log" 2>&1
  rc=$?
  local secs
  secs=$(awk "BEGIN { print $EPOCHREALTIME - $t0 }")
  printf '%-4s %-22s %5.1fs  %s\n' "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$name" "$secs" \
    "$(grep -v '^<' "$log" | tail -n 1)"
  if [ $rc -ne 0 ]; then
    fail=1
    grep -E 'FAIL|failed|kcpu:|deltad:' "$log" | head -n 20 | sed 's/^/      | /'
  fi
}
run golden "$K/tests/test_golden" "$B"
run tp "$K/tests/test_tp" "$B"
DELTAD_TEST_ONLY=lossless_greedy,lossless_sampling DELTAD_TEST_QUICK=1 run spec "$K/tests/test_spec" "$B"
run eng "$K/tests/test_eng" "$B"
if [ -f models/demo.gguf ]; then
  DEMO_DEVICES=cuda:0 run demo tests/golden/test_demo.sh "$K"
  # the daemon: the same chat request to the CPU build and to the emulated GPU
  q='{"model":"demo","messages":[{"role":"user","content":"What is 23 + 45?"}],"max_tokens":16,"temperature":0}'
  qs=${q%\}}',"stream":true}'
  port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
  serve_ask() { # binary, devices, output prefix
    local p pid ok=0
    p=$(port)
    "$1" serve --model models/demo.gguf --host 127.0.0.1 --port "$p" --devices "$2" \
      >"$3.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 600); do
      [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$p/health")" = 200 ] &&
        { ok=1; break; }
      kill -0 $pid 2>/dev/null || break
      sleep 0.1
    done
    if [ $ok -eq 1 ]; then
      curl -s "http://127.0.0.1:$p/v1/chat/completions" -H 'Content-Type: application/json' \
        -d "$q" | python3 -c 'import json,sys; print(json.load(sys.stdin)["choices"][0]["message"]["content"])' >"$3.plain"
      curl -sN "http://127.0.0.1:$p/v1/chat/completions" -H 'Content-Type: application/json' \
        -d "$qs" | python3 -c '
import json, sys
out = []
for line in sys.stdin:
    line = line.strip()
    if line.startswith("data: ") and line != "data: [DONE]":
        for c in json.loads(line[6:]).get("choices", []):
            out.append(c.get("delta", {}).get("content") or "")
print("".join(out))' >"$3.stream"
    fi
    kill -TERM $pid 2>/dev/null
    wait $pid 2>/dev/null
  }
  t0=$EPOCHREALTIME
  serve_ask "$B/deltad" cpu:1 "$K/test-logs/cuda-forward-serve-cpu"
  serve_ask "$K/deltad" cuda:0 "$K/test-logs/cuda-forward-serve-cuda"
  secs=$(awk "BEGIN { print $EPOCHREALTIME - $t0 }")
  c=$K/test-logs/cuda-forward-serve
  want="23 + 45 = 68"
  if [ "$(cat "$c-cpu.plain" 2>/dev/null)" = "$want" ] &&
    cmp -s "$c-cpu.plain" "$c-cuda.plain" && cmp -s "$c-cpu.stream" "$c-cuda.stream" &&
    cmp -s "$c-cpu.plain" "$c-cuda.stream"; then
    printf 'ok   %-22s %5.1fs  serve --devices cuda:0 answers "%s", streaming and not, as cpu:1 does\n' \
      serve "$secs" "$want"
  else
    printf 'FAIL %-22s %5.1fs  cpu: "%s" / "%s", cuda: "%s" / "%s"\n' serve "$secs" \
      "$(cat "$c-cpu.plain" 2>/dev/null)" "$(cat "$c-cpu.stream" 2>/dev/null)" \
      "$(cat "$c-cuda.plain" 2>/dev/null)" "$(cat "$c-cuda.stream" 2>/dev/null)"
    tail -n 5 "$c-cuda.log" | sed 's/^/      | /'
    fail=1
  fi
else
  echo "note: models/demo.gguf absent: the demo and serve checks did not run"
fi
echo "cuda forward: $(($(date +%s) - start))s"
[ $fail -eq 0 ] && echo "cuda forward: every check passed through the CUDA device under kcpu"
exit $fail
