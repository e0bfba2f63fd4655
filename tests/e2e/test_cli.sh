#!/usr/bin/env bash
# test_cli.sh BUILD_DIR — the deltad binary's subcommands end to end on the tiny models:
# usage errors (exit 2, naming the flag), model errors (exit 1, naming the file), and the happy
# paths of generate, logits (+ --mtp), bench and info; the options come from the config rows
# (dashes in --help, underscores accepted, --devices cpu:N with --tp N as its alias), and
# generate runs through the engine (stop strings, speculation, penalties).
set -u
B=${1:?usage: test_cli.sh BUILD_DIR}
D=$B/deltad
M=$B/models/tiny-qwen35.gguf
[ -f "$M" ] || { echo "SKIP: $M missing"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
# expect CODE NEEDLE CMD... : exit status CODE and NEEDLE in stdout+stderr
expect() {
  local code=$1 needle=$2; shift 2
  "$@" >"$tmp/out" 2>&1
  local rc=$?
  if [ "$rc" -eq "$code" ] && grep -qF -- "$needle" "$tmp/out"; then
    pass=$((pass+1))
  else
    fail=$((fail+1)); echo "FAIL: $* -> exit $rc (want $code), needle '$needle'"; sed 's/^/  | /' "$tmp/out" | head -5
  fi
}
expect 2 "usage:" "$D"
expect 2 "unknown command 'frobnicate'" "$D" frobnicate
expect 2 "-m MODEL is required" "$D" generate -p hi
expect 2 "unknown option '--bogus'" "$D" generate -m "$M" --bogus
expect 2 "--n-predict: expected an integer" "$D" generate -m "$M" -n abc
expect 2 "--temp: expected a number" "$D" generate -m "$M" --temp -1
expect 2 "--top-p: expected a number" "$D" generate -m "$M" --top-p 1.5
expect 2 "--threads: expected an integer" "$D" bench -m "$M" -t 99999
expect 2 "--model needs a value" "$D" info --model
expect 1 "/nonexistent.gguf" "$D" generate -m /nonexistent.gguf -p hi
printf 'GGUF\003\000\000\000garbage' >"$tmp/bad.gguf"
expect 1 "bad.gguf" "$D" generate -m "$tmp/bad.gguf" -p hi
expect 2 "bad token id" "$D" logits -m "$M" --tokens 1,999 -o "$tmp/x.f32"
expect 2 "exactly one of --tokens and -p" "$D" logits -m "$M" -o "$tmp/x.f32"
expect 0 "generated: 8 tokens" "$D" generate -m "$M" -p "the cat" -n 8
expect 0 "generated" "$D" generate -m "$M" -p "the cat" -n 8 --temp 0.8 --top-k 20 --seed 7
expect 0 "wrote 3 x 272" "$D" logits -m "$M" --tokens 1,2,3 -o "$tmp/l.f32"
[ "$(stat -c %s "$tmp/l.f32")" -eq $((3*272*4)) ] && pass=$((pass+1)) || { fail=$((fail+1)); echo "FAIL: logits file size"; }
expect 0 "wrote 6 x 272" "$D" logits -m "$M" --tokens 1,2,3 -o "$tmp/m.f32" --mtp
# the trunk rows do not depend on --mtp
cmp -s -n $((3*272*4)) "$tmp/l.f32" "$tmp/m.f32" && pass=$((pass+1)) || { fail=$((fail+1)); echo "FAIL: --mtp changed trunk rows"; }
expect 1 "no MTP block" "$D" logits -m "$B/models/tiny-qwen3.gguf" --tokens 1,2,3 -o "$tmp/q.f32" --mtp
expect 0 "memory plan" "$D" info -m "$M"
expect 0 "roofline" "$D" bench -m "$M" -p 16 -n 4 -r 1 -t 1
expect 0 "devices      2 CPU" "$D" bench -m "$M" -p 16 -n 4 -r 1 --tp 2 --no-bind
# speculation through the engine: every draft source, both rollback modes, same text
expect 0 "lossless         yes" "$D" bench -m "$M" -p 48 -n 24 -r 1 -t 1 --spec all --rollback both
expect 2 "--rollback: expected one of snapshot|recompute|both" "$D" bench -m "$M" --spec mtp --rollback x
expect 2 "--spec: expected one of none|ngram|mtp|ngram,mtp|all" "$D" bench -m "$M" --spec draft
expect 2 "--p-min: expected a number" "$D" bench -m "$M" --spec mtp --p-min 2
# batched decode: a row per batch size, on one and on two devices; a bad list exits 2
expect 0 "result parallel=3 " "$D" bench -m "$M" -n 4 -d 8 -r 1 -t 1 --parallel 1,3
expect 0 "compute-bound" "$D" bench -m "$M" -n 4 -r 1 --parallel 2 --devices cpu:2 --no-bind
# the kernel's own rate is measured, and B = 1 is its own limit: cap exactly 1
expect 0 "eff=1.00 cap=1.00 " "$D" bench -m "$M" -n 4 -d 8 -r 1 -t 1 --parallel 1
expect 0 "matmul kernel" "$D" bench -m "$M" -n 4 -d 8 -r 1 -t 1 --parallel 1
expect 2 "--parallel: expected a comma-separated list" "$D" bench -m "$M" --parallel 1,0
expect 2 "--parallel: trailing ','" "$D" bench -m "$M" --parallel 2,
expect 0 "wrote 3 x 272" "$D" logits -m "$M" --tokens 1,2,3 -o "$tmp/tp.f32" --tp 3 --no-bind
expect 2 "--tp: expected an integer" "$D" generate -m "$M" -p hi --tp 0
# options: help shows dashes and the defaults of the rows; both spellings parse
expect 0 "--spec-type" "$D" generate --help
"$D" generate --help 2>&1 | grep -E '^ +(-[a-z], )?--[a-z-]*_' && { fail=$((fail+1)); echo "FAIL: underscore in generate --help"; } || pass=$((pass+1))
"$D" serve --help 2>&1 | grep -E '^  --[a-z-]*_' && { fail=$((fail+1)); echo "FAIL: underscore in serve --help"; } || pass=$((pass+1))
expect 0 "default 512" "$D" bench --help
expect 0 "generated: 4 tokens" "$D" generate -m "$M" -p "the cat" --n_predict 4 --spec_type none --top_p=1
expect 0 "generated: 4 tokens" "$D" generate -m "$M" -p "the cat" -n 4 --spec-type=ngram,mtp --max-batch-tokens 8
expect 2 "--spec-type: expected one of none|ngram|mtp|ngram,mtp" "$D" generate -m "$M" -p hi --spec-type draft
expect 2 "--devices: expected cpu:N" "$D" generate -m "$M" -p hi --devices gpu:1
expect 2 "--ctx: expected an integer" "$D" logits -m "$M" --tokens 1 -o "$tmp/c.f32" --ctx 0
expect 2 "--seed: expected an integer" "$D" generate -m "$M" -p hi --seed=-3
expect 0 "generated: 1 tokens" "$D" generate -m "$M" -p "hi" -n 1 --spec-type none
expect 2 "exceed --ctx 16" "$D" generate -m "$M" -p "the cat" -n 64 --ctx 16
# --devices cpu:2 is --tp 2: same text at temperature 0, and the same as one device
"$D" generate -m "$M" -p "the cat sat" -n 16 --devices cpu:2 --no-bind >"$tmp/d2" 2>/dev/null
"$D" generate -m "$M" -p "the cat sat" -n 16 --tp 2 --no-bind >"$tmp/t2" 2>/dev/null
"$D" generate -m "$M" -p "the cat sat" -n 16 --spec-type none >"$tmp/d1" 2>/dev/null
cmp -s "$tmp/d2" "$tmp/t2" && [ -s "$tmp/d2" ] && pass=$((pass+1)) || { fail=$((fail+1)); echo "FAIL: --devices cpu:2 differs from --tp 2"; }
cmp -s "$tmp/d2" "$tmp/d1" && pass=$((pass+1)) || { fail=$((fail+1)); echo "FAIL: 2 devices or speculation changed greedy text"; }
expect 0 "devices      2 CPU" "$D" bench -m "$M" -p 16 -n 4 -r 1 --devices cpu:2 --no-bind
# --stop: the text ends before the first stop string, which is never printed
full=$(head -c 40 "$tmp/d1" | tr -d '\n')
stop=${full:6:3}
if [ ${#stop} -eq 3 ]; then
  "$D" generate -m "$M" -p "the cat sat" -n 16 --stop "$stop" --stop zzzz >"$tmp/st" 2>"$tmp/st.err"
  got=$(tr -d '\n' <"$tmp/st")
  [ "$got" = "${full%%"$stop"*}" ] && pass=$((pass+1)) || { fail=$((fail+1)); echo "FAIL: --stop '$stop': got '$got' from '$full'"; }
else
  "$D" generate -m "$M" -p "the cat sat" -n 16 --stop x >/dev/null 2>&1 && pass=$((pass+1)) || { fail=$((fail+1)); echo "FAIL: --stop"; }
fi
q=$'<|im_start|>user\nRepeat: the quick brown fox<|im_end|>\n<|im_start|>assistant\n'
DM=models/demo.gguf
[ -f "$DM" ] || DM=$(dirname "$0")/../../models/demo.gguf
if [ -f "$DM" ]; then
  expect 0 "the quick" "$D" generate -m "$DM" -p "$q" -n 16 --stop brown
  grep -q brown "$tmp/out" && { fail=$((fail+1)); echo "FAIL: --stop string printed"; } || pass=$((pass+1))
fi
# penalties reach the sampler (through the engine): accepted and deterministic
expect 0 "generated" "$D" generate -m "$M" -p "abc" -n 8 --temp 0.7 --repetition-penalty 1.3 --presence-penalty 0.5 --frequency-penalty 0.5 --min-p 0.05
# same seed, same text; greedy is deterministic
"$D" generate -m "$M" -p "abc" -n 12 --temp 0.9 --seed 5 >"$tmp/s1" 2>/dev/null
"$D" generate -m "$M" -p "abc" -n 12 --temp 0.9 --seed 5 >"$tmp/s2" 2>/dev/null
cmp -s "$tmp/s1" "$tmp/s2" && pass=$((pass+1)) || { fail=$((fail+1)); echo "FAIL: seeded sampling not reproducible"; }
echo "test_cli: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
