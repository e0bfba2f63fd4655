#!/usr/bin/env bash
# tests/cuda/test_kcpu.sh [BUILD_DIR] — the CUDA tests without a GPU (issue 29 section 5):
# builds the kcpu emulation flavour (make KCPU=1, build/kcpu: kernels/cuda compiled by g++
# over tools/kcpu) and runs every tests/cuda/test_*.c program under it once per fiber order,
# KCPU_ORDER=forward, reverse and shuffle. Any failure fails the test; there is no skip where
# g++ and python3 exist (the emulation has its own CUDA headers, the toolkit is not needed).
# Then the sanitizer flavours of kcpu (make KCPU=1 SANITIZE=..., their own build dirs, only
# test_cuda_kernels and the selftest built): test_cuda_kernels under ASan+UBSan
# (build/kcpu-address-undefined, shuffled order) and under TSan (build/kcpu-thread, forward
# order: TSan sees a missing barrier in any order); a sanitizer whose runtime this compiler
# lacks, or that cannot start on this kernel, is skipped with a message.
# BUILD_DIR (the calling flavour's, from tests/run.sh) is not used: kcpu has its own.
# Logs: build/kcpu/test-logs/kcpu-<test>-<order>.log, kcpu-<asan|tsan>-*.log.
set -u
cd "$(dirname "$0")/../.." || exit 1
for tool in g++ python3; do
  command -v "$tool" >/dev/null 2>&1 || { echo "SKIP: $tool not found (kcpu needs it)"; exit 77; }
done
K=build/kcpu
ulimit -c 0 # the selftest's deliberate aborts leave no core files
mkdir -p "$K/test-logs"
progs=()
for src in tests/cuda/test_*.c; do progs+=("$(basename "$src" .c)"); done
start=$(date +%s)
# a fresh make: not the caller's jobserver (run.sh is not a recursive make)
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -j2 KCPU=1 \
    "${progs[@]/#/$K/tests/}" "$K/tools/kcpu_selftest" >"$K/test-logs/kcpu-build.log" 2>&1; then
  echo "FAIL: make KCPU=1"
  tail -n 30 "$K/test-logs/kcpu-build.log"
  exit 1
fi
built=$(date +%s)
fail=0
# the emulator first: correct collectives, and each broken program stopped with its kernel named
log="$K/test-logs/kcpu-selftest.log"
if "$K/tools/kcpu_selftest" ok >"$log" 2>&1; then
  echo "ok   kcpu_selftest      ok        $(tail -n 1 "$log")"
else
  echo "FAIL kcpu_selftest ok"; sed 's/^/      | /' "$log"; fail=1
fi
for c in exit-before-shfl mask-missing-lane divergent-sync exit-at-barrier host-pointer \
    sync-in-capture copy-in-capture malloc-in-capture bad-memcpy other-gpu-memory \
    other-gpu-stream; do
  caught=1
  for order in forward reverse shuffle; do
    # a subshell, so the shell's "Aborted" notice lands in the log
    (KCPU_ORDER=$order "$K/tools/kcpu_selftest" "$c"; exit $?) >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ] || ! grep -q '^kcpu: ' "$log"; then
      echo "FAIL kcpu_selftest $c ($order): not caught (exit $rc)"; sed 's/^/      | /' "$log"
      fail=1 caught=0
    fi
  done
  [ $caught -eq 1 ] && echo "ok   kcpu_selftest      $c caught: $(grep -m1 '^kcpu: ' "$log" | cut -c7-100)"
done
for p in "${progs[@]}"; do
  for order in forward reverse shuffle; do
    log="$K/test-logs/kcpu-$p-$order.log"
    t0=$EPOCHREALTIME
    KCPU_ORDER=$order "$K/tests/$p" >"$log" 2>&1
    rc=$?
    secs=$(awk "BEGIN { print $EPOCHREALTIME - $t0 }")
    printf '%-4s %-18s %-8s %5.1fs  %s\n' "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$p" "$order" \
      "$secs" "$(tail -n 1 "$log")"
    if [ $rc -ne 0 ]; then
      fail=1
      grep -E '^FAIL|kcpu:|deltad:' "$log" | head -n 20 | sed 's/^/      | /'
    fi
  done
done
ran=$(date +%s)
echo "kcpu: build $((built - start))s, runs $((ran - built))s"

# one sanitizer flavour: NAME SANITIZE ORDER
sanitized() {
  local name=$1 san=$2 order=$3 S="build/kcpu-${2/+/-}" log t0 rc secs
  log="$K/test-logs/kcpu-$name-build.log"
  if ! echo 'int main(void) { return 0; }' | g++ -fsanitize="${san/+/,}" -x c++ - \
      -o "$K/test-logs/kcpu-$name-probe" >"$log" 2>&1; then
    echo "skip $name: g++ -fsanitize=${san/+/,} cannot link here ($(tail -n 1 "$log"))"; return
  fi
  if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make --no-print-directory -j2 KCPU=1 \
      SANITIZE="$san" "$S/tests/test_cuda_kernels" "$S/tools/kcpu_selftest" >"$log" 2>&1; then
    echo "FAIL make KCPU=1 SANITIZE=$san"; tail -n 30 "$log"; fail=1; return
  fi
  log="$K/test-logs/kcpu-$name-selftest.log"
  "$S/tools/kcpu_selftest" ok >"$log" 2>&1
  rc=$?
  if [ $rc -ne 0 ] && grep -q 'unexpected memory mapping\|failed to allocate' "$log"; then
    echo "skip $name: the sanitizer runtime cannot start here ($(grep -m1 -i 'fatal' "$log"))"
    return
  fi
  if [ $rc -ne 0 ]; then
    echo "FAIL kcpu_selftest ok ($name)"; sed 's/^/      | /' "$log" | head -n 40; fail=1
  fi
  log="$K/test-logs/kcpu-$name-test_cuda_kernels-$order.log"
  t0=$EPOCHREALTIME
  KCPU_ORDER=$order "$S/tests/test_cuda_kernels" >"$log" 2>&1
  rc=$?
  secs=$(awk "BEGIN { print $EPOCHREALTIME - $t0 }")
  printf '%-4s %-18s %-8s %5.1fs  %s\n' "$([ $rc -eq 0 ] && echo ok || echo FAIL)" \
    "test_cuda_kernels" "$name" "$secs" "$(tail -n 1 "$log")"
  if [ $rc -ne 0 ]; then
    fail=1
    grep -E '^FAIL|kcpu:|deltad:|ERROR: AddressSanitizer|WARNING: ThreadSanitizer|runtime error|^ +#[0-9] |SUMMARY' \
      "$log" | head -n 40 | sed 's/^/      | /'
  fi
}
# a TSan report stops the run (ASan and UBSan stop at the first by -fno-sanitize-recover)
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
sanitized asan address+undefined shuffle
sanitized tsan thread forward
echo "kcpu: sanitizer builds and runs $(($(date +%s) - ran))s"
[ $fail -eq 0 ] && echo "kcpu: every tests/cuda program passed in all three fiber orders," \
  "test_cuda_kernels under ASan+UBSan and TSan"
exit $fail
