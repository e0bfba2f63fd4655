#!/usr/bin/env bash
# test_structured.sh BUILD_DIR — structured outputs end to end (issue 31): the schema corpus of
# tests/fixtures/schemas against the demo model and the random tiny model at temperature 0 and
# 1, every finished answer validated with python3-jsonschema; GBNF grammars, streaming, cut
# answers, and the 400s of bad schemas and grammars. The checks are in structured.py.
set -u
B=${1:?usage: test_structured.sh BUILD_DIR}
. "$(dirname "$0")/lib.sh"
e2e_need_build "$B"
e2e_need_cmds python3
python3 -c 'import jsonschema' 2>/dev/null ||
  { echo "SKIP: python3-jsonschema not installed (apt-get install python3-jsonschema)"; exit 77; }
mkdir -p "$B/test-logs"
exec timeout 800 python3 "$(dirname "$0")/structured.py" "$B"
