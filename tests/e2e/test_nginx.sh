#!/usr/bin/env bash
# test_nginx.sh BUILD_DIR — deltad behind a real nginx (Debian nginx-light) with default proxy
# buffering: streaming arrives incrementally (X-Accel-Buffering: no) and a client disconnect
# through nginx cancels the generation. Checks in nginx_proxy.py; skipped without nginx.
set -u
B=${1:?usage: test_nginx.sh BUILD_DIR}
[ -x "$B/deltad" ] || { echo "SKIP: $B/deltad not built"; exit 77; }
[ -f "$B/models/tiny-qwen35.gguf" ] || { echo "SKIP: $B/models/tiny-qwen35.gguf missing"; exit 77; }
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] ||
  { echo "SKIP: nginx not installed (apt-get install nginx-light)"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not installed"; exit 77; }
mkdir -p "$B/test-logs"
PATH=$PATH:/usr/sbin exec timeout 300 python3 "$(dirname "$0")/nginx_proxy.py" "$B"
