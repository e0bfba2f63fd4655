#!/usr/bin/env bash
# test_train_args.sh — tools/train/train.py rejects each out-of-range experiment flag with an
# argparse error (exit 2, the flag named) before it reads the corpus. Skips (77) without
# Debian's /usr/bin/python3 with torch (make test does not need it; make demo-model does).
set -u
cd "$(dirname "$0")/../.." || exit 1
PY=/usr/bin/python3
"$PY" -c 'import torch, numpy' 2>/dev/null || { echo "SKIP: $PY lacks torch/numpy"; exit 77; }
fail=0
check() {   # check WANT_IN_MESSAGE ARGS...
  local want=$1; shift
  out=$("$PY" tools/train/train.py --work "$tmp" --out "$tmp/x.gguf" "$@" 2>&1); rc=$?
  if [ "$rc" -ne 2 ] || ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: train.py $*: rc $rc, want 2 and '$want' in: $out"; fail=1
  fi
  [ -e "$tmp/x.gguf" ] && { echo "FAIL: train.py $* wrote a model"; fail=1; }
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check "--vocab 100" --vocab 100
check "--vocab 5000" --vocab 5000
check "--trigram-heads must be" --trigram-heads 3
check "--bigram-heads must be" --bigram-heads -1
check "--avg-from 1.0" --avg-from 1.0
check "--avg-from -0.5" --avg-from -0.5
check "--rope-dims must be even" --rope-dims 3
check "--rope-dims must be even" --rope-dims 66
check "--rope-base above 1" --rope-base 0.5
check "--hard-copy 2.0" --hard-copy 2
check "--sentence-frac -1.0" --sentence-frac -1
check "--number-copy 1.5" --number-copy 1.5
check "--interval 1: must be 2 .. --n-layer (4)" --interval 1
check "--interval 6: must be 2 .. --n-layer (5)" --interval 6 --n-layer 5
check "--mix: unknown task 'sing'" --mix repeat=30,sing=5
check "--mix: 'lines=-1': the weight must be an integer" --mix lines=-1
check "--mix: 'arith': the weight must be an integer" --mix arith
check "--mix: task mix" --mix repeat=0,lines=0,reverse=0,arith=0,count=0,sequence=0,passage=0,chat=0,complete=0
check "--mtp-rows 0.0: must be above 0" --mtp-rows 0
check "--mtp-rows 1.5: must be above 0" --mtp-rows 1.5
check "--mtp-trunk-grad -0.5: must be 0 .. 1" --mtp-trunk-grad -0.5
check "--procs 0: must be 1 .. 16" --procs 0
check "--gdn-state 100: must be a multiple of 16" --gdn-state 100
check "--gdn-k-heads 3 / --gdn-v-heads 4" --gdn-k-heads 3
check "--induction-heads must be 0 .. 1" --gdn-k-heads 1 --gdn-v-heads 2
check "--rank / --rendezvous are set by --procs" --procs 2 --rank 5 --rendezvous x
[ "$fail" = 0 ] && echo "ok: $(grep -c '^check ' "$0") bad flags rejected"
exit "$fail"
