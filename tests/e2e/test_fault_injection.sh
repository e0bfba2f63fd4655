#!/usr/bin/env bash
# test_fault_injection.sh BUILD_DIR — fault injection (issue 9, STYLE rule 35): failed user-sized
# allocations (DELTAD_FAIL_ALLOC) and failed forward steps (DELTAD_FAIL_STEP) while the daemon
# serves; see fault_injection.py for what is asserted.
#
# Needs a DELTAD_FAULT_INJECTION build: BUILD_DIR itself, or BUILD_DIR-fault-address-undefined /
# BUILD_DIR-fault next to it (build/cpu-fault-address-undefined for build/cpu-address-undefined) (`make fault` builds the first and runs this test on it: ASan makes
# "no leak" part of the check). Skips (77) when there is none. FAULT_PERIOD (default 5) sets the
# sweep's period; FAULT_FULL=1 sweeps one failing allocation at a time (minutes).
set -u
B=${1:?usage: test_fault_injection.sh BUILD_DIR}
cd "$(dirname "$0")/../.." || exit 1
is_fault() { [ -x "$1/deltad" ] && grep -q DELTAD_FAIL_ALLOC "$1/deltad" 2>/dev/null; }
FB=
B=${B%/}
for cand in "$B" "$B-fault-address-undefined" "$B-fault" "${B/-address-undefined/-fault-address-undefined}"; do
  if is_fault "$cand"; then FB=$cand; break; fi
done
[ -n "$FB" ] || { echo "SKIP: no fault-injection build (make fault, or make FAULT=1)"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not installed"; exit 77; }
mkdir -p "$FB/test-logs" "$FB/models"
if [ ! -f "$FB/models/tiny-qwen35.gguf" ]; then
  if [ -f "$B/models/tiny-qwen35.gguf" ]; then cp "$B/models/tiny-qwen35.gguf" "$FB/models/"
  elif [ -x "$FB/tools/mkmodel" ]; then "$FB/tools/mkmodel" --tiny-all "$FB/models" >/dev/null
  fi
fi
[ -f "$FB/models/tiny-qwen35.gguf" ] || { echo "SKIP: no tiny-qwen35.gguf for $FB"; exit 77; }
echo "fault build: $FB"
# ASan: leaks are reported at exit (exit status 23), which the test counts as a failure.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
exec timeout 800 python3 tests/e2e/fault_injection.py "$FB"
