#!/usr/bin/env bash
# test_nginx.sh BUILD_DIR — deltad behind a real nginx (Debian nginx-light) with default proxy
# buffering: streaming arrives incrementally (X-Accel-Buffering: no) and a client disconnect
# through nginx cancels the generation. Checks in nginx_proxy.py; skipped without nginx.
set -u
B=${1:?usage: test_nginx.sh BUILD_DIR}
. "$(dirname "$0")/lib.sh"
e2e_need_build "$B"
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] ||
  { echo "SKIP: nginx not installed (apt-get install nginx-light)"; exit 77; }
e2e_need_cmds python3
mkdir -p "$B/test-logs"
PATH=$PATH:/usr/sbin exec timeout 300 python3 "$(dirname "$0")/nginx_proxy.py" "$B"
