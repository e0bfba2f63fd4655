#!/usr/bin/env bash
# test_sanitized_daemon.sh BUILD_DIR — the daemon under a sanitizer (issue 9): the short load mix
# (streams, cancellations, errors, slow clients), SIGTERM with streams in flight, and no
# sanitizer report in any daemon log; see sanitized_daemon.py.
#
# Runs when BUILD_DIR is a sanitizer build, so `make asan` (AddressSanitizer + UBSan, with
# LeakSanitizer: detect_leaks=1) and `make tsan` (ThreadSanitizer) include it; `make test`
# (build/cpu) skips it (77). By hand:
#   make SANITIZE=thread all && tests/e2e/test_sanitized_daemon.sh build/cpu-thread
#   make SANITIZE=address+undefined all && tests/e2e/test_sanitized_daemon.sh build/cpu-address-undefined
set -u
B=${1:?usage: test_sanitized_daemon.sh BUILD_DIR}
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/lib.sh
case $B in
  *address*) export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
             export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} ;;
  *thread*)  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0:exitcode=66:second_deadlock_stack=1} ;;
  *) echo "SKIP: $B is not a sanitizer build (make asan / make tsan run this test)"; exit 77 ;;
esac
e2e_need_build "$B"
e2e_need_cmds python3
mkdir -p "$B/test-logs"
exec timeout 800 python3 tests/e2e/sanitized_daemon.py "$B"
