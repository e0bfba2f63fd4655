#!/usr/bin/env bash
# tools/bench_mpi.sh BUILD_DIR — tensor parallelism across processes (mpirun) against the same
# split inside one process, on the ~1 GB Q8_0 qwen35 model of tools/bench.sh (made by mkmodel
# when missing). Three configurations of the same two cores, run interleaved for BENCH_ROUNDS
# rounds (3), medians reported:
#   1p x 2t   one process, one CPU device with 2 threads (no tensor parallelism)
#   1p tp2    one process, devices cpu:2 with 1 thread each (shared-memory allreduce)
#   2r tp2    mpirun -np 2, each rank one CPU device with 1 thread (allreduce over MPI)
# Figures: decode and prefill tok/s, and the allreduce time per decoded token (of which the
# part spent waiting for the other side). No assertions: numbers for the README.
#   BENCH_PROMPT (64)  BENCH_GEN (16)  BENCH_REPS (3)  BENCH_ROUNDS (3)
set -euo pipefail
B=${1:?usage: tools/bench_mpi.sh BUILD_DIR}
command -v mpirun >/dev/null || { echo "bench_mpi: mpirun not installed; skipped"; exit 0; }
M=$B/bench-models/qwen35-1g-q8_0.gguf
mkdir -p "$B/bench-models"
[ -f "$M" ] || "$B/tools/mkmodel" --arch qwen35 --preset 1g --type q8_0 -o "$M" >&2
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
root=(); [ "$(id -u)" = 0 ] && root=(--allow-run-as-root)
args=(-m "$M" -p "${BENCH_PROMPT:-64}" -n "${BENCH_GEN:-16}" -r "${BENCH_REPS:-3}")
res=$(mktemp)
trap 'rm -f "$res"' EXIT
cat "$M" >/dev/null
for round in $(seq 1 "${BENCH_ROUNDS:-3}"); do
  for cfg in "1p_x_2t" "1p_tp2" "2r_tp2"; do
    case $cfg in
      1p_x_2t) out=$("$B/deltad" bench "${args[@]}" --devices cpu:1 -t 2) ;;
      1p_tp2) out=$("$B/deltad" bench "${args[@]}" --devices cpu:2 -t 1) ;;
      2r_tp2) out=$(mpirun "${root[@]}" -np 2 "$B/deltad" bench "${args[@]}" --devices cpu:1 -t 1 2>/dev/null) ;;
    esac
    line=$(echo "$out" | grep '^result')
    echo "round $round $cfg: $line" >&2
    echo "$cfg $line" >>"$res"
  done
done
echo
echo "== tensor parallelism across processes ($(basename "$M"), medians of ${BENCH_ROUNDS:-3} interleaved rounds; load $(cut -d' ' -f1-3 /proc/loadavg))"
printf '%-10s %10s %10s %14s %14s\n' config "decode t/s" "prefill t/s" "allreduce/tok" "of it waiting"
for cfg in 1p_x_2t 1p_tp2 2r_tp2; do
  grep "^$cfg " "$res" | python3 -c '
import statistics, sys
rows = [dict(kv.split("=") for kv in l.split()[2:]) for l in sys.stdin]
med = lambda k: statistics.median(float(r[k]) for r in rows)
print("%-10s %10.2f %10.1f %11.1f ms %11.1f ms" % (sys.argv[1], med("tg_tok"), med("pp_tok"),
      med("ar_tg_us") / 1e3, med("ar_tg_wait_us") / 1e3))' "$cfg"
done
