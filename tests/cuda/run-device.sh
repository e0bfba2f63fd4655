#!/usr/bin/env bash
# tests/cuda/run-device.sh — the one-shot GPU session of issue 8: build with CUDA (and NCCL when
# nccl.h exists), record the GPU, run the kernel parity test with --perf, and, when the binary
# has a CUDA forward, `deltad bench` on a synthetic ~1 GB qwen35 model. Everything goes to
# $OUT/report.txt (plus the full logs beside it). Bounded to about 8 minutes in total.
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

section "bench"
left=$(( 480 - ($(date +%s) - T0) ))
if ! "$B/deltad" bench --help 2>&1 | grep -q -- "cuda"; then
  say "deltad has no CUDA forward yet (bench --help does not mention cuda): bench skipped"
elif [ $left -lt 90 ]; then
  say "bench skipped: only ${left}s of the 8-minute budget left"
else
  M=/tmp/deltad-bench-qwen35-1g.gguf
  if timeout 60 "$B/tools/mkmodel" --arch qwen35 --preset 1g -o "$M" >"$OUT/mkmodel.log" 2>&1; then
    ls -la "$M" | tee -a "$R"
    timeout $(( left - 30 )) "$B/deltad" bench -m "$M" --devices cuda -p 512 -n 128 \
      >"$OUT/bench.log" 2>&1
    say "bench exit code $?"
    tail -n 25 "$OUT/bench.log" | tee -a "$R"
  else
    say "mkmodel failed (see $OUT/mkmodel.log)"
  fi
  rm -f "$M"
fi

section "done in $(( $(date +%s) - T0 ))s"
[ $prc -eq 0 ] && exit 0
[ $prc -eq 77 ] && exit 77
exit 1
