#!/usr/bin/env bash
# tests/fuzz/run.sh BUILD_DIR [NAME...] — run the libFuzzer targets of build/fuzz (make
# fuzz-build) for FUZZ_TIME seconds each (default 60; `make fuzz` and tests/fuzz/smoke.sh call
# this). NAME is what follows fuzz_ in tests/fuzz/fuzz_NAME.c (api, cfg, gguf, jinja, tok);
# default all of them.
#
# Each target starts from its committed seeds (tests/fuzz/corpus/NAME, plus the real chat
# templates for jinja) and keeps what it finds in BUILD_DIR/fuzz/corpus-NAME between runs. The
# tokenizer targets need the tiny model (BUILD_DIR/models/tiny-qwen35.gguf, made with mkmodel
# when missing) and use the Qwen3 tokenizer converted with tok2gguf when ../shared has it.
# Prints one line per target (runs, exec/s, new inputs) and "fuzz: N passed, N failed"; exit 1
# on a crash, leak, timeout or failed invariant, with the reproducer in BUILD_DIR/fuzz/.
set -u
B=${1:?usage: tests/fuzz/run.sh BUILD_DIR [NAME...]}
shift
cd "$(dirname "$0")/../.." || exit 1
T=${FUZZ_TIME:-60}
F=build/fuzz
OUT=$B/fuzz
mkdir -p "$OUT" || exit 1
ALL=$(for f in tests/fuzz/fuzz_*.c; do n=${f##*/fuzz_}; echo "${n%.c}"; done)
NAMES=${*:-$ALL}

# The models the tokenizer targets load (see fz_model.h).
MODEL=$B/models/tiny-qwen35.gguf
if [ ! -f "$MODEL" ] && [ -x "$B/tools/mkmodel" ]; then
  "$B/tools/mkmodel" --tiny-all "$B/models" >"$OUT/mkmodel.log" 2>&1
fi
[ -f "$MODEL" ] || MODEL=build/cpu/models/tiny-qwen35.gguf
QWEN=$F/qwen3-tok.gguf
QJSON=../shared/data/tokenizers/qwen3/tokenizer.json
if [ ! -f "$QWEN" ] && [ -f "$QJSON" ] && [ -x "$B/tools/tok2gguf" ]; then
  "$B/tools/tok2gguf" "$QJSON" -o "$QWEN" >"$OUT/tok2gguf.log" 2>&1 || rm -f "$QWEN"
fi
export DELTAD_FUZZ_MODEL=$MODEL DELTAD_FUZZ_TOKENIZER=$QWEN

pass=0 fail=0 skip=0
for n in $NAMES; do
  bin=$F/fuzz_$n
  if [ ! -x "$bin" ]; then echo "$n: not built (make fuzz-build)"; fail=$((fail+1)); continue; fi
  case $n in
    api|tok) if [ ! -f "$MODEL" ]; then echo "$n: skipped, no $MODEL"; skip=$((skip+1)); continue; fi ;;
  esac
  seeds=(tests/fuzz/corpus/$n)
  extra=()
  case $n in
    api) extra=(-dict=tests/fuzz/api.dict -max_len=4096) ;;
    gguf) extra=(-max_len=4096) ;;
    jinja) extra=(-max_len=16384); [ -d ../shared/data/templates ] && seeds+=(../shared/data/templates) ;;
    *) extra=(-max_len=4096) ;;
  esac
  mkdir -p "$OUT/corpus-$n"
  log=$OUT/fuzz_$n.log
  # -detect_leaks stays on (the default): a leak is a failure like a crash.
  "$bin" -max_total_time="$T" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$OUT/crash-$n-" "${extra[@]}" "$OUT/corpus-$n" "${seeds[@]}" >"$log" 2>&1
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
  eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
  new=$(sed -n 's/^stat::new_units_added: *//p' "$log")
  if [ "$rc" -eq 0 ]; then
    pass=$((pass+1))
    printf '%-6s ok    %ss, %s runs, %s exec/s, %s new inputs\n' "$n" "$T" "${runs:-?}" "${eps:-?}" "${new:-?}"
  else
    fail=$((fail+1))
    printf '%-6s FAIL  exit %d, reproducer: %s\n' "$n" "$rc" "$(ls -t "$OUT"/crash-"$n"-* "$OUT"/leak-"$n"-* "$OUT"/timeout-"$n"-* 2>/dev/null | head -n 1)"
    grep -m 3 -E 'invariant failed|ERROR: |SUMMARY' "$log" | sed 's/^/       | /'
  fi
done
echo "fuzz: $pass passed, $fail failed, $skip skipped"
[ "$fail" -eq 0 ]
