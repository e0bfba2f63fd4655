#!/usr/bin/env bash
# tests/run.sh BUILD_DIR — run every test program of a build and print one summary line:
#   "N passed, N failed, N skipped"  (a program exiting 77 is a skip, see tests/unit/test.h)
# Tiny models for the golden tests are generated first under BUILD_DIR/models.
set -u
B=${1:?usage: tests/run.sh BUILD_DIR}
cd "$(dirname "$0")/.." || exit 1
pass=0 fail=0 skip=0
failed=()
export DELTAD_TEST_BUILD=$B
mkdir -p "$B/models" "$B/test-logs"
if [ -x "$B/tools/mkmodel" ]; then
  "$B/tools/mkmodel" --tiny-all "$B/models" >"$B/test-logs/mkmodel.log" 2>&1 ||
    { echo "FAIL mkmodel (see $B/test-logs/mkmodel.log)"; fail=$((fail+1)); failed+=(mkmodel); }
fi
for t in "$B"/tests/test_* tests/golden/test_*.sh tests/e2e/test_*.sh tests/cuda/test_*.sh \
    tests/fuzz/smoke.sh; do
  [ -x "$t" ] || continue
  n=$(basename "$t")
  log="$B/test-logs/$n.log"
  start=$(date +%s)
  timeout 900 "$t" "$B" >"$log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  case $rc in
    0) pass=$((pass+1)); printf 'ok    %-28s %3ss  %s\n' "$n" "$secs" "$(tail -n 1 "$log")" ;;
    77) skip=$((skip+1)); printf 'skip  %-28s       %s\n' "$n" "$(grep -m1 SKIP "$log")" ;;
    *) fail=$((fail+1)); failed+=("$n"); printf 'FAIL  %-28s %3ss  (exit %d)\n' "$n" "$secs" "$rc"
       sed 's/^/      | /' "$log" | tail -n 40 ;;
  esac
done
echo
[ ${#failed[@]} -gt 0 ] && echo "failed: ${failed[*]}"
echo "$pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
