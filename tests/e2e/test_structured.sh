#!/usr/bin/env bash
# test_structured.sh BUILD_DIR — structured outputs end to end (issue 31): the schema corpus of
# tests/fixtures/schemas against the demo model and the random tiny model at temperature 0 and
# 1, every finished answer validated with python3-jsonschema; GBNF grammars, streaming, cut
# answers, and the 400s of bad schemas and grammars (structured.py); then enforced tool choice
# through the openai npm client (node/tool_choice.mjs).
set -u
B=${1:?usage: test_structured.sh BUILD_DIR}
. "$(dirname "$0")/lib.sh"
e2e_need_build "$B"
e2e_need_cmds python3
python3 -c 'import jsonschema' 2>/dev/null ||
  { echo "SKIP: python3-jsonschema not installed (apt-get install python3-jsonschema)"; exit 77; }
mkdir -p "$B/test-logs"
here=$(cd "$(dirname "$0")" && pwd)
timeout 800 python3 "$here/structured.py" "$B"
rc=$?

# tool choice through the official openai npm client (skipped without node or the package)
T=$here/../../../shared/data/templates/Qwen3.5-4B.jinja
if command -v node >/dev/null 2>&1 && [ -d "$here/node/node_modules/openai" ] && [ -f "$T" ]; then
  e2e_start "$B" "$B/test-logs/structured_tools_deltad.log" --slots 2 --ctx 2048 \
    --chat-template-file "$T"
  timeout 300 node "$here/node/tool_choice.mjs" "http://127.0.0.1:$E2E_PORT/v1" tiny-qwen35 || rc=1
  e2e_stop
  [ "$E2E_STOP" -eq 0 ] || { echo "FAIL: deltad exit status $E2E_STOP after SIGTERM"; rc=1; }
else
  echo "note: node, the openai package or the Qwen3.5 template missing: tool_choice.mjs skipped"
fi
echo "test_structured: exit $rc"
exit $rc
