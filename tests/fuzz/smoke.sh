#!/usr/bin/env bash
# tests/fuzz/smoke.sh BUILD_DIR — short libFuzzer run of the GGUF reader (part of tests/run.sh).
#
# Builds tests/fuzz/fuzz_gguf.c with clang -fsanitize=fuzzer,address,undefined into
# BUILD_DIR/fuzz, writes a seed corpus with tests/fuzz/gguf_seeds.c, and fuzzes for
# FUZZ_SECONDS (default 20). Exit 0 when nothing crashed; 77 with "SKIP: reason" when clang or
# libFuzzer is unavailable; 1 on a crash (the reproducer is left in BUILD_DIR/fuzz).
set -u
B=${1:?usage: tests/fuzz/smoke.sh BUILD_DIR}
cd "$(dirname "$0")/../.." || exit 1
SECS=${FUZZ_SECONDS:-20}
OUT=$B/fuzz

command -v clang >/dev/null 2>&1 || { echo "SKIP: clang not found"; exit 77; }
mkdir -p "$OUT" || exit 1
probe=$OUT/probe.c
echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }' >"$probe"
if ! clang -fsanitize=fuzzer,address,undefined "$probe" -o "$OUT/probe" >/dev/null 2>&1; then
  echo "SKIP: clang cannot link libFuzzer (-fsanitize=fuzzer)"
  exit 77
fi

CFLAGS="-std=c11 -g -O1 -D_GNU_SOURCE -Iengine -Ikernels/cpu"
clang $CFLAGS -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  tests/fuzz/fuzz_gguf.c engine/gguf.c engine/util.c -o "$OUT/fuzz_gguf" -lm -pthread || exit 1
clang $CFLAGS tests/fuzz/gguf_seeds.c engine/gguf.c engine/util.c -o "$OUT/gguf_seeds" -lm \
  -pthread || exit 1

seeds=$OUT/seeds-gguf
corpus=$OUT/corpus-gguf
rm -rf "$seeds" && mkdir -p "$seeds" "$corpus"
"$OUT/gguf_seeds" "$seeds" || exit 1

# New inputs go to $corpus (kept between runs); the seeds are read-only inputs.
"$OUT/fuzz_gguf" -max_total_time="$SECS" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$OUT/crash-" -print_final_stats=1 "$corpus" "$seeds" 2>&1 | tail -n 25
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  echo "fuzz_gguf: crash (exit $rc), reproducer in $OUT/crash-*"
  exit 1
fi
echo "fuzz_gguf: no crash in ${SECS}s"
