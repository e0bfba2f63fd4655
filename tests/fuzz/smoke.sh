#!/usr/bin/env bash
# tests/fuzz/smoke.sh BUILD_DIR — the short fuzz run of `make test`: builds every libFuzzer
# target (make fuzz-build: clang, ASan + UBSan, objects in build/fuzz) and runs each for
# FUZZ_SECONDS (default 10, at most 15) through tests/fuzz/run.sh: the HTTP request path
# (api), the config parser (cfg), the GGUF reader (gguf), the chat-template interpreter
# (jinja) and the tokenizer (tok). Exit 0 when nothing crashed; 77 with "SKIP: reason" when
# clang or libFuzzer is unavailable; 1 on a crash (the reproducer is left in BUILD_DIR/fuzz).
set -u
B=${1:?usage: tests/fuzz/smoke.sh BUILD_DIR}
cd "$(dirname "$0")/../.." || exit 1
SECS=${FUZZ_SECONDS:-10}
[ "$SECS" -gt 15 ] && SECS=15
mkdir -p "$B/fuzz" || exit 1

command -v clang >/dev/null 2>&1 || { echo "SKIP: clang not found"; exit 77; }
probe=$B/fuzz/probe.c
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }' >"$probe"
if ! clang -fsanitize=fuzzer,address,undefined "$probe" -o "$B/fuzz/probe" >/dev/null 2>&1; then
  echo "SKIP: clang cannot link libFuzzer (-fsanitize=fuzzer)"
  exit 77
fi
if ! make --no-print-directory -s FUZZ=1 fuzz-build >"$B/fuzz/build.log" 2>&1; then
  tail -n 30 "$B/fuzz/build.log"
  echo "fuzz targets did not build (see $B/fuzz/build.log)"
  exit 1
fi
FUZZ_TIME=$SECS tests/fuzz/run.sh "$B"
