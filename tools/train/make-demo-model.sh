#!/usr/bin/env bash
# tools/train/make-demo-model.sh [BUILD_DIR] — what `make demo-model` does: train the demo model
# from scratch (seeded), write models/demo.gguf (F16) and models/demo-q8_0.gguf, regenerate the
# golden fixture tests/fixtures/demo/ and measure quality of both through the engine.
#
# Environment: SEED (default 1), STEPS (default: train.py's), THREADS (torch's own threads,
# default 1), BLAS_THREADS (OpenBLAS's, default 2: 1.4x faster f32 training on 2 cores, where
# 2 torch threads were slower than 1), PROCS (data-parallel processes, train.py's --procs;
# default 2, as the committed model was trained: another count gives another model; each rank
# runs one torch and one BLAS thread, so THREADS and BLAS_THREADS apply only with PROCS=1),
# PYTHON (default /usr/bin/python3), SKIP_EVAL=1 to stop after the fixture.
# Needs Debian's python3-torch (1.13) and python3-numpy; nothing is downloaded. The natural
# text comes from /usr/share/{common-licenses,doc/*/copyright,man} (and fortunes if installed).
set -euo pipefail
B=${1:-build/cpu}
cd "$(dirname "$0")/../.." || exit 1
PY=${PYTHON:-/usr/bin/python3}
WORK=build/demo-model

if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
  echo "make-demo-model: $PY lacks torch or numpy; on Debian: apt-get install python3-torch python3-numpy" >&2
  exit 1
fi
[ -d /usr/share/common-licenses ] || { echo "make-demo-model: /usr/share/common-licenses missing (base-files)" >&2; exit 1; }
[ -x "$B/deltad" ] || { echo "make-demo-model: $B/deltad not built (run make)" >&2; exit 1; }

# Without an optimised BLAS, torch's f32 GEMMs run on Debian's reference BLAS (~3 GFLOP/s here);
# OpenBLAS (libopenblas0-pthread) takes over libblas.so.3 through Debian's alternatives.
if ! update-alternatives --query libblas.so.3-x86_64-linux-gnu 2>/dev/null | grep -q '^Value: .*openblas'; then
  echo "make-demo-model: warning: libblas.so.3 is not OpenBLAS; f32 training will be very slow" \
       "(apt-get install libopenblas0-pthread)" >&2
fi
export OPENBLAS_NUM_THREADS=${BLAS_THREADS:-2}
mkdir -p "$WORK"
args=(--out models/demo.gguf --work "$WORK" --seed "${SEED:-1}" --threads "${THREADS:-1}")
[ -n "${STEPS:-}" ] && args+=(--steps "$STEPS")
args+=(--procs "${PROCS:-2}")
start=$(date +%s)
"$PY" tools/train/train.py "${args[@]}" 2>&1 | tee "$WORK/train.log"
echo "make-demo-model: trained in $(( $(date +%s) - start ))s"
"$PY" tools/train/quantize_demo.py models/demo.gguf models/demo-q8_0.gguf
"$PY" tools/train/make_fixture.py models/demo.gguf tests/fixtures/demo
ls -l models/demo.gguf models/demo-q8_0.gguf
if [ "${SKIP_EVAL:-0}" != 1 ]; then
  for m in demo demo-q8_0; do
    echo "== eval of models/$m.gguf through $B/deltad"
    "$PY" tools/train/eval_demo.py --model "models/$m.gguf" --deltad "$B/deltad" \
      --json "$WORK/eval-$m.json" 2>&1 | tee "$WORK/eval-$m.log"
  done
fi
