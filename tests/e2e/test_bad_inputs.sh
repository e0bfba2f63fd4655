#!/usr/bin/env bash
# test_bad_inputs.sh BUILD_DIR — executes the tables of docs/bad-inputs.md (issue 9): every row
# with a tuple in its "Sent as" cell is sent to a fresh daemon (or to the binary, for config,
# flag and GGUF rows) and its "Answer" cell is checked. See tests/e2e/bad_inputs.py.
set -u
B=${1:?usage: test_bad_inputs.sh BUILD_DIR}
cd "$(dirname "$0")/../.." || exit 1
[ -x "$B/deltad" ] || { echo "SKIP: $B/deltad not built"; exit 77; }
[ -f "$B/models/tiny-qwen35.gguf" ] || { echo "SKIP: $B/models/tiny-qwen35.gguf missing"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "SKIP: python3 not installed"; exit 77; }
mkdir -p "$B/test-logs"
exec timeout 600 python3 tests/e2e/bad_inputs.py "$B" "$@"
