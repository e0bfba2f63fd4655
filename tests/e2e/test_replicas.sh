#!/usr/bin/env bash
# test_replicas.sh BUILD_DIR — three deltad replicas behind a real nginx running the shipped
# config/nginx-deltad.conf: session affinity meets the prompt cache, a killed replica and a
# drained one lose nothing they were not running (checks in replicas.py). Skipped without nginx.
set -u
B=${1:?usage: test_replicas.sh BUILD_DIR}
. "$(dirname "$0")/lib.sh"
e2e_need_build "$B"
[ -f "$B/models/tiny-qwen3.gguf" ] || { echo "SKIP: $B/models/tiny-qwen3.gguf missing"; exit 77; }
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] ||
  { echo "SKIP: nginx not installed (apt-get install nginx-light)"; exit 77; }
e2e_need_cmds python3
mkdir -p "$B/test-logs"
PATH=$PATH:/usr/sbin exec timeout 300 python3 "$(dirname "$0")/replicas.py" "$B"
