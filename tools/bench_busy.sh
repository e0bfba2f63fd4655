#!/usr/bin/env bash
# tools/bench_busy.sh BUILD_DIR — `make bench`: speed with a busy neighbour (issue 33, item 5).
# The ~1 GB synthetic qwen35 Q8_0 of tools/bench.sh, prefill and decode measured by `deltad
# bench` with 1 thread on a quiet machine and with 2 threads while a busy-loop process pinned
# to one core (BUSY_CPU) competes with the second thread. The two cases alternate
# BENCH_REPS times (so load drift from elsewhere hits both alike); the loop is started before
# each busy run and killed by its PID after it. Prints the medians and the ratios busy/quiet
# (the goal: >= 1, i.e. two threads that share a core lose no more than the half core they
# do not get).
#   BENCH_PROMPT (128)  BENCH_GEN (16)  BENCH_REPS (5)  BUSY_CPU (1)  BUSY_DEPTH (128)
set -euo pipefail
kv_awk=$(cat "$(dirname "$0")/bench_kv.awk")
B=${1:?usage: tools/bench_busy.sh BUILD_DIR}
M=$B/bench-models
mkdir -p "$M"
model=$M/qwen35-1g-q8_0.gguf
[ -f "$model" ] || "$B/tools/mkmodel" --arch qwen35 --preset 1g --type q8_0 -o "$model" >&2
prompt=${BENCH_PROMPT:-128} ngen=${BENCH_GEN:-16} reps=${BENCH_REPS:-5}
cpu=${BUSY_CPU:-1} depth=${BUSY_DEPTH:-128}
if ! taskset -c "$cpu" true 2>/dev/null || [ "$(nproc)" -lt 2 ]; then
  echo "bench_busy.sh: needs 2 CPUs and CPU $cpu allowed (BUSY_CPU); skipped"
  exit 0
fi
busy=""
stop_busy() {
  if [ -n "$busy" ]; then
    kill "$busy" 2>/dev/null || true
    wait "$busy" 2>/dev/null || true
    busy=""
  fi
}
results=$(mktemp)
trap 'stop_busy; rm -f "$results"' EXIT
run() { # run CASE THREADS
  "$B/deltad" bench -m "$model" -t "$2" -p "$prompt" -n "$ngen" -d "$depth" -r 1 |
    sed -n "s/^result /case=$1 /p" >>"$results"
}
cat "$model" >/dev/null # into the page cache before the first run
echo "== $(basename "$model"): prefill $prompt, decode $ngen at depth $depth; busy loop on CPU $cpu"
for r in $(seq "$reps"); do
  run quiet1 1
  taskset -c "$cpu" sh -c 'while :; do :; done' &
  busy=$!
  run busy2 2
  stop_busy
  run quiet2 2
  echo "rep $r/$reps done"
done
echo "load: $(uptime | sed 's/.*load average/load average/')"
awk "$kv_awk"'
{
  c = kv($0, "case"); n[c]++
  if (c == "quiet1") { pq[n[c]] = kv($0, "pp_tok"); tq[n[c]] = kv($0, "tg_tok") }
  if (c == "busy2") { pb[n[c]] = kv($0, "pp_tok"); tb[n[c]] = kv($0, "tg_tok") }
  if (c == "quiet2") { p2[n[c]] = kv($0, "pp_tok"); t2[n[c]] = kv($0, "tg_tok") }
}
END {
  mpq = median(pq, n["quiet1"]); mtq = median(tq, n["quiet1"])
  mpb = median(pb, n["busy2"]); mtb = median(tb, n["busy2"])
  mp2 = median(p2, n["quiet2"]); mt2 = median(t2, n["quiet2"])
  printf "%-28s %12s %12s\n", "medians of " n["quiet1"] " interleaved runs", "prefill t/s", "decode t/s"
  printf "%-28s %12.1f %12.2f\n", "1 thread, quiet", mpq, mtq
  printf "%-28s %12.1f %12.2f\n", "2 threads, quiet", mp2, mt2
  printf "%-28s %12.1f %12.2f\n", "2 threads, busy neighbour", mpb, mtb
  printf "%-28s %12.2f %12.2f   (goal >= 1)\n", "ratio busy 2 / quiet 1", mpb / mpq, mtb / mtq
  printf "result busy pp_quiet1=%.2f tg_quiet1=%.3f pp_quiet2=%.2f tg_quiet2=%.3f pp_busy2=%.2f " \
         "tg_busy2=%.3f pp_ratio=%.3f tg_ratio=%.3f\n", mpq, mtq, mp2, mt2, mpb, mtb, mpb / mpq, mtb / mtq
}' "$results"
