#!/usr/bin/env bash
# tools/bench_spec.sh BUILD_DIR — the speculative-decoding part of `make bench`: single-stream
# (batch 1) greedy decode tokens/s without speculation and with n-gram, MTP and n-gram+MTP
# drafts, on an echo/edit-style prompt (the answer repeats text of the prompt) and on a
# free-generation prompt; acceptance length (drafts accepted per verification); and the cost of
# a rollback by GDN snapshot versus by recomputation (the debug mode spec_rollback = recompute).
# Each `deltad bench --spec all --rollback both` call runs every configuration in turn within
# each repetition (so load drift hits all alike) and reports medians of BENCH_REPS runs; see
# server/cli/cmd_spec.c. The summary table comes last, with the load average before and after.
#
# Models: a synthetic ~1 GB Q8_0 qwen35 (random weights, made once by mkmodel into
# BUILD_DIR/bench-models as tools/bench.sh does: its MTP head almost never agrees with the
# trunk, so its MTP rows measure the overhead of drafts that are never accepted, at batch 1
# and, with 8 concurrent streams, at batch 8), models/demo.gguf when it exists (the trained
# demo model: the real MTP speed-up), and the MTP proof models (mkmodel --mtp-agree P, the
# same shapes and size: a trunk that walks a cycle of tokens and an MTP head that agrees with
# it after a fraction P of them; P = 1, 0.8 and 0.65): the memory-bound MTP speed-up at known
# agreement.
# Knobs (environment):
#   BENCH_REPS (5)  BENCH_SPEC_GEN (96 tokens per run)  BENCH_THREADS (1)
#   BENCH_SPEC_MODELS ("synthetic demo proof")  BENCH_SPEC_AGREE ("1 0.8 0.65")  BENCH_SPEC_ROLLBACK (both: snapshot|recompute|both)
#   BENCH_SPEC_DEMO (models/demo.gguf: the demo model file)  BENCH_SPEC_DEMO_REPS (15)
set -euo pipefail
kv_awk=$(cat "$(dirname "$0")/bench_kv.awk")
B=${1:?usage: tools/bench_spec.sh BUILD_DIR}
M=$B/bench-models
mkdir -p "$M"
reps=${BENCH_REPS:-5} ngen=${BENCH_SPEC_GEN:-96} threads=${BENCH_THREADS:-1}
rollback=${BENCH_SPEC_ROLLBACK:-both}

model_file() {
  case $1 in
    synthetic)
      local f=$M/qwen35-1g-q8_0.gguf
      [ -f "$f" ] || "$B/tools/mkmodel" --arch qwen35 --preset 1g --type q8_0 -o "$f" >&2
      echo "$f" ;;
    demo) local d=${BENCH_SPEC_DEMO:-models/demo.gguf}; [ -f "$d" ] && echo "$d" || true ;;
    proof*)
      local a=${1#proof} f=$M/qwen35-1g-q8_0-mtp${1#proof}.gguf
      [ -f "$f" ] || "$B/tools/mkmodel" --preset 1g --type q8_0 --mtp-agree "$a" -o "$f" >&2
      echo "$f" ;;
    *) echo "bench_spec.sh: unknown model '$1'" >&2; exit 2 ;;
  esac
}

# The prompts. echo: a ChatML request (the form the demo model was trained on) whose answer
# copies text of the prompt, so n-gram lookup finds it; free: plain text to continue, with
# nothing to copy (the demo model continues it for the whole run, in the style of the licence
# texts it was trained on).
im() { printf '<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n' "$1"; }
prompt_echo=$(im "Repeat after me: the quick brown fox jumps over the lazy dog and the lazy dog sleeps in the warm sun by the old stone wall near the river")
prompt_free="This program is free software; you can redistribute it and/or modify it under the terms of the"

results=$(mktemp)
trap 'rm -f "$results"' EXIT
start=$(date +%s)
load0=$(cut -d' ' -f1-3 /proc/loadavg)
names=""
for name in ${BENCH_SPEC_MODELS:-synthetic demo proof}; do
  if [ "$name" = proof ]; then
    for a in ${BENCH_SPEC_AGREE:-1 0.8 0.65}; do names="$names proof$a"; done
  else
    names="$names $name"
  fi
done
for name in $names; do
  model=$(model_file "$name")
  if [ -z "$model" ]; then
    echo "== $name: models/demo.gguf not found (make demo-model), skipped"
    continue
  fi
  cat "$model" >/dev/null # into the page cache before the first timed run
  r=$reps
  [ "$name" = demo ] && r=${BENCH_SPEC_DEMO_REPS:-15} # ~0.1 s runs: more of them
  case $name in
    proof*) # free only (the echo prompt's answer is the same cycle); MTP drafts only
      echo "== $(basename "$model") prompt=free threads=$threads gen=$ngen reps=$r mtp"
      out=$("$B/deltad" bench -m "$model" -t "$threads" -n "$ngen" -r "$r" --spec mtp \
            --text "$prompt_free")
      echo "$out"
      echo "$out" | sed -n "s/^result /name=$name prompt=free /p" >>"$results"
      continue ;;
  esac
  for p in echo free; do
    var=prompt_$p
    echo "== $(basename "$model") prompt=$p threads=$threads gen=$ngen reps=$r"
    out=$("$B/deltad" bench -m "$model" -t "$threads" -n "$ngen" -r "$r" \
          --spec all --rollback "$rollback" --text "${!var}")
    echo "$out"
    echo "$out" | sed -n "s/^result /name=$name prompt=$p /p" >>"$results"
  done
  if [ "$name" = synthetic ]; then
    # the worst case for the overhead goal: MTP drafts at every chance (no confidence floor),
    # none accepted, so every cost of speculation shows and back-off is all that limits it
    echo "== $(basename "$model") prompt=free threads=$threads gen=$ngen reps=$reps mtp --p-min 0"
    out=$("$B/deltad" bench -m "$model" -t "$threads" -n "$ngen" -r "$reps" --spec mtp \
          --p-min 0 --text "$prompt_free")
    echo "$out"
    echo "$out" | sed -n "s/^result spec=mtp /name=$name prompt=free spec=mtp,p0 /p" >>"$results"
    # the same at batch 8: 8 concurrent streams (by CPU time: the 8 streams' work)
    for p0 in 0.05 0; do
      echo "== $(basename "$model") prompt=free threads=$threads gen=$ngen reps=$reps mtp" \
           "--p-min $p0 --parallel 8"
      out=$("$B/deltad" bench -m "$model" -t "$threads" -n "$ngen" -r "$reps" --spec mtp \
            --p-min "$p0" --parallel 8 --text "$prompt_free")
      echo "$out"
      tag=mtp,b8; [ "$p0" = 0 ] && tag=mtp,p0,b8
      echo "$out" | sed -n "s/^result spec=mtp /name=$name prompt=free spec=$tag /p" >>"$results"
    done
  fi
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "== summary: batch 1, greedy, up to $ngen tokens per run, medians of $reps runs (demo:" \
     "${BENCH_SPEC_DEMO_REPS:-15}), $threads" \
     "thread(s); $(( $(date +%s) - start )) s; load average $load0 before, $load1 after" \
     "($(nproc) cores)"
awk "$kv_awk"'
BEGIN {
  printf "%-9s %-6s %-9s | %8s %8s %7s %7s | %7s %7s %6s | %8s %7s %9s\n", "model", "prompt",
         "drafts", "base", "spec", "speedup", "by CPU", "drafted", "accept", "len", "recomp",
         "rollbk", "ms/rollbk"
  printf "%-9s %-6s %-9s | %8s %8s %7s %7s | %7s %7s %6s | %8s %7s %9s\n", "", "", "", "tok/s",
         "tok/s", "", "time", "", "", "", "tok/s", "", "(rec-snap)"
}
{
  printf "%-9s %-6s %-9s | %8.2f %8.2f %7.3f %7.3f | %7d %7d %6.2f | %8s %7s %9s%s\n",
         kv($0, "name"), kv($0, "prompt"), kv($0, "spec"), kv($0, "base_tok_s"),
         kv($0, "spec_tok_s"), kv($0, "speedup"), kv($0, "cpu_speedup"), kv($0, "drafted"),
         kv($0, "accepted"), kv($0, "accept_len"),
         kv($0, "rec_tok_s") == "" ? "-" : sprintf("%.2f", kv($0, "rec_tok_s")),
         kv($0, "rec_rollbacks") == "" ? "-" : kv($0, "rec_rollbacks"),
         kv($0, "rec_ms_per_rollback") == "" ? "-" : sprintf("%+.2f", kv($0, "rec_ms_per_rollback")),
         kv($0, "lossless") == 1 ? "" : "  (text differs: see below)"
}
END {
  print ""
  print "len = drafts accepted per verification (tokens per verification step = 1 + len)."
  print "by CPU time = the speed-up measured by process CPU time instead of wall time: on a shared"
  print "machine it leaves out the time the engine waited for a core. mtp,p0 = MTP drafting with"
  print "no confidence floor (--p-min 0): the worst case of drafts that are never accepted."
  print ",b8 = 8 concurrent streams (batch 8), tok/s summed over them. proof<P> = the MTP proof"
  print "model whose head agrees with the trunk after a fraction P of the tokens of its cycle."
  print "ms/rollbk = (decode time with recompute - with snapshot) / rollbacks by recompute."
  print "text differs = the greedy output with drafts is not byte-identical to the output without"
  print "them: the batched CPU kernels round differently from the one-row decode kernels (see"
  print "kernels/cpu/kq.h), which flips near-tied argmaxes of the random synthetic model."
}' "$results"
