#!/usr/bin/env bash
# tools/ptxas_check.sh [NVCC] — `make cuda-check`'s resource gate: compiles every kernels/cuda/*.cu
# for sm_90 with ptxas's -v, -warn-spills and -warn-lmem-usage, and fails when a kernel spills
# registers or uses local memory unless its file says why in a comment naming the kernel:
#   /* ptxas-local: k_name — why the local memory is there */   (or ptxas-spill:)
# Prints each kernel's registers and stack frame either way.
set -u
NVCC=${1:-/usr/local/cuda/bin/nvcc}
cd "$(dirname "$0")/.." || exit 1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
for cu in kernels/cuda/*.cu; do
  log=$tmp/$(basename "$cu").log
  if ! "$NVCC" -O2 -std=c++17 -gencode arch=compute_90,code=sm_90 -I. \
      -Xptxas -v,-warn-spills,-warn-lmem-usage -c "$cu" -o "$tmp/x.o" >"$log" 2>&1; then
    echo "✗ $cu does not compile"; tail -20 "$log"; fail=1; continue
  fi
  # "ptxas warning : Local memory used for function '_Z6k_ropePf...', size of stack frame: 40 bytes"
  while IFS= read -r line; do
    mangled=$(sed -n "s/.*function '\([^']*\)'.*/\1/p" <<<"$line")
    name=$(python3 -c 'import re,sys
m = re.match(r"_Z(\d+)", sys.argv[1])
print(sys.argv[1][len(m.group(0)):len(m.group(0)) + int(m.group(1))] if m else sys.argv[1])' "$mangled")
    kind=local; case $line in *pilled*) kind=spill ;; esac
    if grep -q "ptxas-$kind: $name\b" "$cu"; then
      echo "  $cu: $name: $kind memory, explained in the file"
    else
      echo "✗ $cu: $name: $line"
      echo "  (fix it, or say why in a comment: /* ptxas-$kind: $name — reason */)"
      fail=1
    fi
  done < <(grep "ptxas warning" "$log" | sort -u)
done
[ $fail -eq 0 ] && echo "✓ ptxas: no unexplained register spills or local memory (sm_90)"
exit $fail
