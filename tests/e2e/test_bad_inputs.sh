#!/usr/bin/env bash
# test_bad_inputs.sh BUILD_DIR — executes the tables of docs/bad-inputs.md (issue 9): every row
# with a tuple in its "Sent as" cell is sent to a fresh daemon (or to the binary, for config,
# flag and GGUF rows) and its "Answer" cell is checked. See tests/e2e/bad_inputs.py.
set -u
B=${1:?usage: test_bad_inputs.sh BUILD_DIR}
cd "$(dirname "$0")/../.." || exit 1
. tests/e2e/lib.sh
e2e_need_build "$B"
e2e_need_cmds python3
mkdir -p "$B/test-logs"
exec timeout 600 python3 tests/e2e/bad_inputs.py "$B" "$@"
