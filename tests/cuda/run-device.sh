#!/usr/bin/env bash
# tests/cuda/run-device.sh — the one-shot GPU session (issues 29/30): build with CUDA (and NCCL
# when nccl.h exists), record the GPU, run the kernel and device parity tests, the whole
# forward pass through the CUDA device on the real GPU (golden logits, TP when there are 2+
# GPUs, lossless speculation, the engine tests, the demo model), then `deltad bench` on
# synthetic ~1 GB qwen35 Q8_0 / Q4_K and qwen35moe models (batch 1 and 8 decode, prefill 512;
# the Q8_0 decode with CUDA graphs on and off, --cuda-graphs).
# Everything goes to $OUT/report.txt (plus the full logs beside it), in about 8 minutes.
#
# Usage (repository root, no network needed): OUT=/some/dir tests/cuda/run-device.sh
# Exit: 0 parity passed, 1 build or parity failed, 77 no GPU (SKIP).
set -u
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-build/device-out}
mkdir -p "$OUT"
R="$OUT/report.txt"
: >"$R"
say() { echo "$*" | tee -a "$R"; }
section() { say ""; say "==== $* ($(date -u +%H:%M:%S))"; }
T0=$(date +%s)

section "GPU"
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >>"$R" 2>&1; then
  say "SKIP: no NVIDIA GPU (nvidia-smi missing or failing)"
  exit 77
fi
nvidia-smi >>"$R" 2>&1
nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem,power.limit \
  --format=csv >>"$R" 2>&1

section "build"
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
"$NVCC" --version | tail -n 2 | tee -a "$R"
FLAGS="CUDA=1"
B=build/cuda
if [ -f /usr/local/cuda/include/nccl.h ] || [ -f /usr/include/nccl.h ]; then
  FLAGS="CUDA=1 NCCL=1"
  B=build/cuda-nccl
fi
say "make $FLAGS -j16"
bstart=$(date +%s)
# shellcheck disable=SC2086
if ! timeout 300 make $FLAGS -j16 >"$OUT/build.log" 2>&1; then
  say "BUILD FAILED after $(( $(date +%s) - bstart ))s; last lines of $OUT/build.log:"
  grep -E "error|Error" "$OUT/build.log" | head -n 30 | tee -a "$R"
  tail -n 20 "$OUT/build.log" | tee -a "$R"
  exit 1
fi
say "built in $(( $(date +%s) - bstart ))s ($B)"

section "kernel parity (tests/cuda/test_cuda_kernels --perf)"
timeout 180 "$B/tests/test_cuda_kernels" --perf >"$OUT/parity.log" 2>&1
prc=$?
grep -E "^(FAIL|device|perf)" "$OUT/parity.log" | tee -a "$R"
tail -n 1 "$OUT/parity.log" | tee -a "$R"
say "parity exit code $prc (0 pass, 1 fail, 77 skip, 124 timeout, >128 crash)"
if [ $prc -gt 1 ] && [ $prc -ne 77 ]; then
  say "last lines of the parity log:"
  tail -n 15 "$OUT/parity.log" | tee -a "$R"
fi

section "CUDA device vs CPU device (tests/cuda/test_dev_cuda)"
timeout 60 "$B/tests/test_dev_cuda" >"$OUT/dev_cuda.log" 2>&1
drc=$?
grep -E "^FAIL" "$OUT/dev_cuda.log" | tee -a "$R"
tail -n 1 "$OUT/dev_cuda.log" | tee -a "$R"
say "test_dev_cuda exit code $drc"
[ $prc -eq 0 ] && [ $drc -ne 0 ] && [ $drc -ne 77 ] && prc=1

section "forward through the CUDA device (DELTAD_TEST_DEVICE=cuda, tests/cuda/test_cuda_forward.sh's checks on the real GPU)"
mkdir -p "$B/models"
timeout 60 "$B/tools/mkmodel" --tiny-all "$B/models" >"$OUT/mkmodel-tiny.log" 2>&1 ||
  say "mkmodel --tiny-all failed (see $OUT/mkmodel-tiny.log)"
NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
fwd() { # name, seconds, command...
  local name=$1 secs=$2 rc
  shift 2
  DELTAD_TEST_DEVICE=cuda timeout "$secs" "$@" >"$OUT/fwd-$name.log" 2>&1
  rc=$?
  say "$name: exit $rc: $(grep -v '^<' "$OUT/fwd-$name.log" | tail -n 1)"
  grep -E "FAIL|failed|CUDA error|NCCL error" "$OUT/fwd-$name.log" | head -n 10 | tee -a "$R"
  [ $rc -ne 0 ] && [ $prc -eq 0 ] && prc=1
}
fwd golden 90 "$B/tests/test_golden" "$B"
if [ "$NGPU" -ge 2 ]; then fwd tp 120 "$B/tests/test_tp" "$B"; else say "tp: skipped, $NGPU GPU"; fi
DELTAD_TEST_ONLY=lossless_greedy,lossless_sampling DELTAD_TEST_QUICK=1 fwd spec 120 "$B/tests/test_spec" "$B"
fwd eng 90 "$B/tests/test_eng" "$B"
[ -f models/demo.gguf ] && DEMO_DEVICES=cuda:0 fwd demo 60 tests/golden/test_demo.sh "$B"

section "bench (deltad bench --devices cuda:0; synthetic ~1 GB models)"
"$B/deltad" info >"$OUT/info.txt" 2>&1
grep -A8 "^CUDA GPUs" "$OUT/info.txt" | tee -a "$R"
bench() { # arch type preset, then the bench flags
  local arch=$1 type=$2 preset=$3 left M
  shift 3
  left=$(( 470 - ($(date +%s) - T0) ))
  [ $left -lt 40 ] && { say "bench $arch $type: skipped, ${left}s left"; return; }
  M=/tmp/deltad-bench-$arch-$type.gguf
  [ -f "$M" ] || timeout 90 "$B/tools/mkmodel" --arch "$arch" --preset "$preset" --type "$type" -o "$M" \
    >>"$OUT/mkmodel.log" 2>&1 || { say "mkmodel $arch $type failed"; return; }
  timeout $(( left - 10 )) "$B/deltad" bench -m "$M" --devices cuda:0 "$@" \
    >"$OUT/bench-$arch-$type$(echo "$@" | tr -d ' -').log" 2>&1
  say "bench $arch $type $*: exit $?"
  grep -E "^(devices|prefill|bandwidth|decode|roofline|limits|graphs| +[0-9]+ )" \
    "$OUT/bench-$arch-$type$(echo "$@" | tr -d ' -').log" | tee -a "$R"
}
bench qwen35 q8_0 1g -p 512 -n 128 --reps 3
bench qwen35 q8_0 1g --parallel 1,8 -n 64 --reps 3 --cuda-graphs on
bench qwen35 q8_0 1g --parallel 1,8 -n 64 --reps 3 --cuda-graphs off
bench qwen35 q4_k 1g -p 512 -n 128 --reps 3
bench qwen35moe q8_0 moe-1g -p 512 -n 128 --reps 3
rm -f /tmp/deltad-bench-*.gguf

section "done in $(( $(date +%s) - T0 ))s"
[ $prc -eq 0 ] && exit 0
[ $prc -eq 77 ] && exit 77
exit 1
