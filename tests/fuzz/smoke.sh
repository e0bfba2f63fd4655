#!/usr/bin/env bash
# tests/fuzz/smoke.sh BUILD_DIR — short libFuzzer runs of the GGUF reader and of the chat-template
# interpreter (part of tests/run.sh).
#
# Builds tests/fuzz/fuzz_gguf.c and tests/fuzz/fuzz_jinja.c with clang
# -fsanitize=fuzzer,address,undefined into BUILD_DIR/fuzz, writes a GGUF seed corpus with
# tests/fuzz/gguf_seeds.c (the real chat templates seed the Jinja fuzzer), and fuzzes GGUF for
# FUZZ_SECONDS (default 20) and Jinja for JINJA_FUZZ_SECONDS (default 15). Exit 0 when nothing
# crashed; 77 with "SKIP: reason" when clang or libFuzzer is unavailable; 1 on a crash (the
# reproducer is left in BUILD_DIR/fuzz).
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

# ---- fuzz_jinja: template text compiled and rendered against a fixed chat context ----------
JSECS=${JINJA_FUZZ_SECONDS:-15}
clang $CFLAGS -Iserver -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  tests/fuzz/fuzz_jinja.c engine/util.c -o "$OUT/fuzz_jinja" -lcjson -lm -pthread || exit 1
jseeds=$OUT/seeds-jinja
jcorpus=$OUT/corpus-jinja
rm -rf "$jseeds" && mkdir -p "$jseeds" "$jcorpus"
cp ../shared/data/templates/*.jinja "$jseeds"/ 2>/dev/null || true
printf '%s' '{%- for m in messages if m.role != "tool" %}{{ loop.index }}:{{ m.content|trim|upper }}{% endfor %}' >"$jseeds/loop"
printf '%s' '{% macro m(a, b=2) %}{{ caller(a) if caller is defined }}{{ b }}{% endmacro %}{% call(x) m(1) %}[{{ x }}]{% endcall %}' >"$jseeds/macro"
printf '%s' '{% set ns = namespace(s="") %}{% for t in tools %}{% set ns.s = ns.s ~ t|tojson(indent=2) %}{% endfor %}{{ ns.s[::-1]|length }}' >"$jseeds/ns"
"$OUT/fuzz_jinja" -max_total_time="$JSECS" -max_len=16384 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$OUT/crash-jinja-" -print_final_stats=1 "$jcorpus" "$jseeds" 2>&1 | tail -n 25
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  echo "fuzz_jinja: crash (exit $rc), reproducer in $OUT/crash-jinja-*"
  exit 1
fi
echo "fuzz_gguf: no crash in ${SECS}s; fuzz_jinja: no crash in ${JSECS}s"
