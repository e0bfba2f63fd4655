#!/usr/bin/env bash
# test_load_short.sh BUILD_DIR — the short form of the load test (issue 9): tools/loadtest.py with
# 8 clients for 15 s (LOAD_CLIENTS / LOAD_SECONDS override) against a daemon it starts, mixing
# streaming and non-streaming chat, /v1/responses and /v1/messages (streamed, cancelled and bad
# requests too), cancellations, oversize bodies, malformed JSON and slow
# clients; asserts every request got a complete answer or a proper error, no slot leaked, RSS
# within 5% of its post-warm-up value (not checked in sanitizer builds, whose allocators keep
# freed memory in quarantine), and the daemon still answers. The full run is
# `tools/loadtest.py --build build/cpu` (64 clients x 120 s).
set -u
B=${1:?usage: test_load_short.sh BUILD_DIR}
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/lib.sh
e2e_need_build "$B"
e2e_need_cmds python3
rss=5
case $B in *address*|*thread*|*undefined*) rss=-1 ;; esac
mkdir -p "$B/test-logs"
exec timeout 300 python3 tools/loadtest.py --build "$B" -c "${LOAD_CLIENTS:-8}" \
  -t "${LOAD_SECONDS:-15}" --warmup 8 --idle-timeout 2 --rss-tolerance "$rss"
