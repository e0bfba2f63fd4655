#!/usr/bin/env bash
# test_mpi.sh BUILD_DIR — one model over several processes under mpirun (issue 34, "One model
# across hosts"), on loopback: logits of 2 and 3 ranks equal to one process on the tiny model
# of every arch; `serve` through rank 0 answers the demo model's question as one process does;
# speculation stays lossless across ranks; a worker rank killed (SIGKILL) or stopped (SIGSTOP)
# mid-stream gives the client a clean error and ends the job. Checks in mpi.py. Skipped without
# mpirun or without MPI in the build.
set -u
B=${1:?usage: test_mpi.sh BUILD_DIR}
. "$(dirname "$0")/lib.sh"
e2e_need_build "$B"
e2e_need_cmds python3 mpirun
# a build without MPI refuses mpirun at once, naming the reason
if OMPI_COMM_WORLD_SIZE=1 "$B/deltad" info 2>&1 | grep -q "built without MPI"; then
  echo "SKIP: $B/deltad was built without MPI (install libopenmpi-dev and rebuild)"
  exit 77
fi
case $B in
  *thread*) echo "SKIP: Open MPI's own threads are not instrumented for ThreadSanitizer"; exit 77 ;;
  # LeakSanitizer would report what libmpi allocates in MPI_Init and keeps until exit
  *address*) export ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 ;;
esac
mkdir -p "$B/test-logs"
exec timeout 240 python3 "$(dirname "$0")/mpi.py" "$B"
