#!/usr/bin/env bash
# test_conn_limits.sh BUILD_DIR — stalled and slow clients cannot keep others out: max_conns
# closes the connection that waited longest without a complete request, receive_timeout bounds
# how long a request may take to arrive (checks in conn_limits.py).
set -u
B=${1:?usage: test_conn_limits.sh BUILD_DIR}
. "$(dirname "$0")/lib.sh"
e2e_need_build "$B"
e2e_need_cmds python3
mkdir -p "$B/test-logs"
exec timeout 300 python3 "$(dirname "$0")/conn_limits.py" "$B"
