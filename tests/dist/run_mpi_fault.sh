#!/usr/bin/env bash
# Runs `mpirun -np 2 PROGRAM MODE` and passes when the job ends non-zero within LIMIT seconds with
# EXPECTED (an extended regular expression) in its output: a fault ended the job, said what, and
# did not hang it.
#   run_mpi_fault.sh MPIRUN PROGRAM MODE LIMIT EXPECTED
set -uo pipefail
mpirun=$1 program=$2 mode=$3 limit=$4 expected=$5
start=$(date +%s)
output=$(timeout --signal=KILL $((limit + 30)) "${mpirun}" -np 2 --oversubscribe "${program}" "${mode}" 2>&1)
code=$?
elapsed=$(($(date +%s) - start))
printf '%s\n' "${output}"
echo "run_mpi_fault: exit ${code} after ${elapsed} s"
if ((code == 0)); then echo "FAIL: the job ended with 0"; exit 1; fi
if ((code == 137)); then echo "FAIL: the job hung (killed after $((limit + 30)) s)"; exit 1; fi
if ((elapsed > limit)); then echo "FAIL: took ${elapsed} s, more than ${limit}"; exit 1; fi
if ! grep -Eq -- "${expected}" <<<"${output}"; then echo "FAIL: no '${expected}' in the output"; exit 1; fi
echo "PASS"
