#!/bin/sh
# test_strict — the golden, speculation, TP and engine tests again on the strict device
# (engine/compute/dev_strict.c): device memory is PROT_NONE outside the device's own calls, so
# a host dereference of an activation or cache address anywhere in the forward pass faults.
# tests/unit/testutil.c (testutil_dev_cpu) reads DELTAD_TEST_DEVICE.
B=${1:-build/cpu}
cd "$(dirname "$0")/../.." || exit 1
export DELTAD_TEST_DEVICE=strict
rc=0
for t in test_golden test_spec test_tp test_eng; do
  if [ ! -x "$B/tests/$t" ]; then
    echo "SKIP: $B/tests/$t not built"
    exit 77
  fi
  "$B/tests/$t" "$B" >"$B/test-logs/strict-$t.log" 2>&1
  r=$?
  [ $r -eq 77 ] && { echo "SKIP: $t skipped (see $B/test-logs/strict-$t.log)"; exit 77; }
  [ $r -ne 0 ] && { tail -n 30 "$B/test-logs/strict-$t.log"; rc=1; }
  echo "strict $t: $(tail -n 1 "$B/test-logs/strict-$t.log")"
done
exit $rc
