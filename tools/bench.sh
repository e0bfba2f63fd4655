#!/usr/bin/env bash
# tools/bench.sh BUILD_DIR — `make bench`: synthetic qwen35 models (~1 GB Q8_0, ~0.55 GB Q4_K)
# and a qwen35moe (~1.2 GB Q8_0, 8 of 32 experts routed), each with 1 and 2 threads: prefill of
# 512 tokens against the in-cache int8 peak, decode at context 128 and 4096 against the
# bandwidth roofline; medians of 5 repetitions (see server/cli/cmd_bench.c for the method). Each
# `deltad bench` run prints its own report; the summary table comes last.
#
# Models are generated once into BUILD_DIR/bench-models. Before a model's first run its pages
# are dropped from the page cache (dd iflag=nocache) and the file is read once front to back,
# as a model read from disk would be: readahead then fills the page cache with large folios,
# which the mapping uses as 2 MiB pages. The pages mkmodel's writes leave behind, or a MoE
# model's experts faulted in one by one, are mostly 4 KiB ones, which decode reads 20-40% slower
# (TLB misses); the mapping also asks for 2 MiB pages itself (madvise, engine/model/gguf.c).
#
# Tensor parallelism (issue 7): for each N in BENCH_TP, the Q8_0 model on N CPU devices of one
# thread each, against one device with N threads and one device with one thread, prefill and
# decode at the first depth, with the allreduce time per decode token (and how much of it was
# waiting for the other device to arrive, i.e. imbalance or a descheduled thread rather than
# communication). Knobs (environment):
#   BENCH_PROMPT (512)  BENCH_GEN (16 tokens per decode repetition)  BENCH_REPS (5)
#   BENCH_DEPTHS ("128 4096")  BENCH_THREADS ("1 2")  BENCH_MODELS ("q8_0 q4_k moe")
#   BENCH_TP ("2"; empty skips the section)
#
# Batched decode (issue 33): `deltad bench --parallel` on the Q8_0 model with the most threads of
# BENCH_THREADS: B sequences decoding together at the first depth, aggregate and per-sequence
# tok/s, B1 efficiency, the fractions of the bandwidth roofline and of the compute peak.
#   BENCH_PARALLEL ("1,2,3,4,6,8,12,16,32"; empty skips the section)
set -euo pipefail
kv_awk=$(cat "$(dirname "$0")/bench_kv.awk")
B=${1:?usage: tools/bench.sh BUILD_DIR}
M=$B/bench-models
mkdir -p "$M"
gen() { # gen NAME ARGS...
  local f=$M/$1.gguf; shift
  [ -f "$f" ] || "$B/tools/mkmodel" "$@" -o "$f" >&2
  echo "$f"
}
model_file() {
  case $1 in
    q8_0) gen qwen35-1g-q8_0 --arch qwen35 --preset 1g --type q8_0 ;;
    q4_k) gen qwen35-1g-q4_k --arch qwen35 --preset 1g --type q4_k ;;
    moe) gen qwen35moe-1g-q8_0 --arch qwen35moe --preset moe-1g --type q8_0 ;;
    *) echo "bench.sh: unknown model '$1'" >&2; exit 2 ;;
  esac
}
prompt=${BENCH_PROMPT:-512} ngen=${BENCH_GEN:-16} reps=${BENCH_REPS:-5}
results=$(mktemp) tpres=$(mktemp)
trap 'rm -f "$results" "$tpres"' EXIT
start=$(date +%s)
for name in ${BENCH_MODELS:-q8_0 q4_k moe}; do
  model=$(model_file "$name")
  dd if="$model" iflag=nocache count=0 status=none || true
  cat "$model" >/dev/null
  for t in ${BENCH_THREADS:-1 2}; do
    first=1
    for depth in ${BENCH_DEPTHS:-128 4096}; do
      # the prefill is measured once per model and thread count, with the first depth
      p=1; [ $first = 1 ] && p=$prompt
      echo "== $(basename "$model") threads=$t prefill=$p depth=$depth"
      out=$("$B/deltad" bench -m "$model" -t "$t" -p "$p" -n "$ngen" -d "$depth" -r "$reps")
      echo "$out"
      echo "$out" | sed -n "s/^result /name=$name first=$first /p" >>"$results"
      first=0
    done
  done
done

tp_run() { # tp_run MODEL DEVICES THREADS DEPTH
  echo "== $(basename "$1") devices=$2 threads=$3 prefill=$prompt depth=$4"
  local out
  # -t is threads per device (the config key's meaning): THREADS in all, split over the devices
  out=$("$B/deltad" bench -m "$1" --devices "cpu:$2" -t "$(($3 / $2))" -p "$prompt" -n "$ngen" -d "$4" -r "$reps")
  echo "$out"
  echo "$out" | sed -n "s/^result /devices=$2 /p" >>"$tpres"
}
if [ -n "${BENCH_TP-2}" ]; then
  model=$(model_file q8_0)
  depth=${BENCH_DEPTHS:-128 4096}; depth=${depth%% *}
  tp_run "$model" 1 1 "$depth"
  for n in ${BENCH_TP-2}; do
    tp_run "$model" 1 "$n" "$depth"
    tp_run "$model" "$n" "$n" "$depth"
  done
fi

parres=""
if [ -n "${BENCH_PARALLEL-1,2,3,4,6,8,12,16,32}" ]; then
  model=$(model_file q8_0)
  depth=${BENCH_DEPTHS:-128 4096}; depth=${depth%% *}
  thr=${BENCH_THREADS:-1 2}; thr=${thr##* }
  parres=$("$B/deltad" bench -m "$model" -t "$thr" -n "$ngen" -d "$depth" -r "$reps" \
    --parallel "${BENCH_PARALLEL-1,2,3,4,6,8,12,16,32}")
  echo "$parres"
fi

echo
echo "== summary: medians of $reps runs; decode $ngen tokens per run; $(( $(date +%s) - start )) s"
echo "load: $(uptime | sed 's/.*load average/load average/')"
awk "$kv_awk"'
BEGIN {
  printf "%-6s %3s | %9s %6s %7s | %6s %9s %8s %6s %6s %7s\n", "model", "thr", "prefill", "%peak",
         "peak", "depth", "decode", "roofline", "%roof", "MiB/t", "triad"
  printf "%-6s %3s | %9s %6s %7s | %6s %9s %8s %6s %6s %7s\n", "", "", "tok/s", "", "GOP/s", "",
         "tok/s", "tok/s", "", "", "GB/s"
}
{
  pre = "-"; pct = "-"; pk = "-"
  if (kv($0, "first") == 1) {
    pre = sprintf("%.1f", kv($0, "pp_tok")); pct = sprintf("%.1f", kv($0, "pp_pct"))
    pk = sprintf("%.0f", kv($0, "peak_gops"))
  }
  printf "%-6s %3s | %9s %6s %7s | %6s %9.2f %8.2f %6.1f %6.0f %7.1f\n", kv($0, "name"),
         kv($0, "threads"), pre, pct, pk, kv($0, "depth"), kv($0, "tg_tok"), kv($0, "roof_tok"),
         kv($0, "roof_pct"), kv($0, "mib_tok"), kv($0, "bw_gbs")
  if (kv($0, "threads") == 1)
    cpu = cpu sprintf("%-6s   1 | %9s %6s %7s | %6s %9.2f %8s %6.1f\n", kv($0, "name"),
                      kv($0, "first") == 1 ? sprintf("%.1f", kv($0, "pp_tok_cpu")) : "-",
                      kv($0, "first") == 1 ? sprintf("%.1f", kv($0, "pp_pct_cpu")) : "-", "",
                      kv($0, "depth"), kv($0, "tg_tok_cpu"), "", kv($0, "roof_pct_cpu"))
}
END {
  if (cpu != "") {
    print ""
    print "one thread, rates by CPU time (leaves out time the thread was not running):"
    printf "%s", cpu
  }
}' "$results"

if [ -s "$tpres" ]; then
  echo
  echo "tensor parallel: $(basename "$(model_file q8_0)"), prefill $prompt, decode at the depth shown;"
  echo "allreduce per decode token (wait = waiting for the other devices to arrive):"
  awk "$kv_awk"'
BEGIN {
  printf "%7s %7s | %9s %9s | %6s %9s %8s | %9s %9s %7s\n", "devices", "threads", "prefill",
         "speedup", "depth", "decode", "speedup", "allreduce", "wait", "%decode"
  printf "%7s %7s | %9s %9s | %6s %9s %8s | %9s %9s %7s\n", "", "", "tok/s", "", "", "tok/s", "",
         "us/tok", "us/tok", ""
}
{
  if (NR == 1) { pp1 = kv($0, "pp_tok"); tg1 = kv($0, "tg_tok") }
  ar = kv($0, "devices") > 1
  printf "%7s %7s | %9.1f %8.2fx | %6s %9.2f %7.2fx | %9s %9s %7s\n", kv($0, "devices"),
         kv($0, "threads"), kv($0, "pp_tok"), kv($0, "pp_tok") / pp1, kv($0, "depth"),
         kv($0, "tg_tok"), kv($0, "tg_tok") / tg1, ar ? kv($0, "ar_tg_us") : "-",
         ar ? kv($0, "ar_tg_wait_us") : "-", ar ? kv($0, "ar_tg_pct") : "-"
}' "$tpres"
fi

if [ -n "$parres" ]; then
  echo
  echo "batched decode: $(basename "$(model_file q8_0)"), B sequences together (deltad bench --parallel):"
  echo "$parres" | sed -n '/^ *B  *tok\/s/,$p' | grep -v '^result '
  echo "$parres" | grep '^limits'
fi
