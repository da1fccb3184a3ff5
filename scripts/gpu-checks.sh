#!/usr/bin/env bash
# The GPU run of the bundle in one command (issue "The first real GPU run"), for a device lease of
# a few minutes: stoke train on CUDA in fp32/bf16/fp16 with a Ctrl-C and a resume, stoke bench nn
# against PyTorch (same GPU, same process tree, alternating) with a per-layer profile, bench
# device and bench train. Run it through scripts/run-on-device.sh, which runs the GPU tests first
# and sets the library path:
#
#   OUT=/tmp/suite scripts/run-on-device.sh scripts/gpu-checks.sh
#
# (with bundle.tar.xz from scripts/make-bundle.sh carried; the first GPU run, issue 24, took three
# such calls of 3-4 minutes each, startup included, on an H200)
#
# Every step has its own time limit (a slow step costs its limit, not the lease). Logs go to
# $CHECKS_OUT (default out/gpu-checks): checks.log, and the JSON lines in results.jsonl.
# Environment: STEPS (timed resnet50 steps, default 6), SKIP (space-separated step names to skip:
# nn train device pipeline sanitizer), NN_CASES (model:precision pairs for bench nn, default every
# one of resnet50 and small_cnn in bf16, f16, f32), TRAIN_PRECISIONS (default "fp32 bf16 fp16";
# the Ctrl-C and resume run always runs with the train step).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

out=${CHECKS_OUT:-out/gpu-checks}
mkdir -p "$out"
stoke=${STOKE:-bundle/bin/stoke}
python=${PYTHON:-python3}
work=${WORK:-/tmp/stoke-gpu-checks}
mkdir -p "$work"
export STOKE_CACHE=$work/cache
steps=${STEPS:-6}
skip=" ${SKIP:-} "
results=$out/results.jsonl
: > "$results"

source scripts/lib/device-steps.sh  # log, step, failed_steps
# The device memory in use, polled every 100 ms until stopped; peak_memory prints its largest.
memory_watch() { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$work/memory.csv" 2>/dev/null & watch_pid=$!; }
peak_memory() { kill "$watch_pid" 2>/dev/null; wait "$watch_pid" 2>/dev/null; sort -n "$work/memory.csv" | tail -1; }
keep_json() { grep '^{' | tee -a "$results"; }

main() {
  log "gpu-checks: commit $(cat bundle/COMMIT 2>/dev/null || echo '?'), $(nproc) cores"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader
  "$python" -c 'import torch; print("torch", torch.__version__, "cudnn", torch.backends.cudnn.version())'

  if [[ $skip != *" nn "* ]]; then
    log "== bench nn: stoke and PyTorch alternating, same model, batch, data on the device"
    cases=${NN_CASES:-resnet50:bf16 resnet50:f16 resnet50:f32 small_cnn:bf16 small_cnn:f16 small_cnn:f32}
    for case in $cases; do
      model=${case%%:*}
      precision=${case#*:}
      if [[ $model == resnet50 ]]; then
        shape=(--model resnet50 --batch 256 --size 224 --classes 1000); n=$steps; w=2
      else
        shape=(--model small_cnn --batch 256 --size 32 --classes 10); n=30; w=5
      fi
      layout=(--channels-last)
      [[ $precision == f32 ]] && layout=()
      profile=()
      [[ $model == resnet50 && $precision == bf16 ]] && profile=(--profile 1)
      step 150 "$stoke" bench nn "${shape[@]}" --steps "$n" --warmup "$w" --device cuda --precision "$precision" \
        "${layout[@]}" "${profile[@]}" --json | keep_json
      step 90 "$python" scripts/bench_nn_torch.py "${shape[@]}" --steps "$n" --warmup 3 --device cuda \
        --precision "$precision" "${layout[@]}" | keep_json
    done
  fi

  if [[ $skip != *" train "* ]]; then
    log "== stoke train on the built-in dataset (small_cnn, 32 px) in fp32, bf16, fp16; peak device memory"
    for precision in ${TRAIN_PRECISIONS-fp32 bf16 fp16}; do
      epochs=3
      [[ $precision == fp32 ]] && epochs=6  # the CPU run's 6 epochs: the accuracy to compare with
      memory_watch
      step 150 "$stoke" train --device cuda --precision "$precision" --epochs "$epochs" --json \
        --checkpoint "$work/train-$precision" | keep_json | tail -2
      log "peak device memory (nvidia-smi, whole GPU) during train $precision: $(peak_memory) MiB"
    done
    log "== Ctrl-C 2.5 s into a 6-epoch run (SIGINT), then --resume from the checkpoint it wrote"
    "$stoke" train --device cuda --precision bf16 --epochs 6 --json --checkpoint "$work/interrupted" \
      > "$work/interrupted.json" 2> "$work/interrupted.err" &
    pid=$!
    sleep 2.5; kill -INT "$pid"; wait "$pid"; log "interrupted run: exit $?"
    tail -3 "$work/interrupted.err"; keep_json < "$work/interrupted.json" | tail -1
    ls "$work/interrupted"
    step 120 "$stoke" train --device cuda --precision bf16 --epochs 6 --json --checkpoint "$work/interrupted" \
      --resume "$work/interrupted/last.safetensors" | keep_json | tail -2
  fi

  if [[ $skip != *" device "* ]]; then
    log "== bench device"
    step 60 "$stoke" bench device --device cuda --batch 256 --size 224
    step 60 "$stoke" bench device --device cuda --batch 256 --size 224 --convert bf16 --json | keep_json
  fi

  if [[ $skip != *" pipeline "* ]]; then
    log "== bench train: the whole pipeline against the compute bound"
    step 90 "$stoke" bench train --device cuda --model small_cnn --batch 256 --repeats 1 --seconds 5 --json | keep_json
    corpus=$work/shapes-256
    step 60 "$stoke" gen-shapes --out "$corpus" --classes 10 --train 300 --val 0 --size 256 --quiet
    step 120 "$stoke" bench train --device cuda --data "$corpus/train" --model resnet50 --batch 256 --precision bf16 \
      --repeats 1 --seconds 8 --json | keep_json
  fi
  if [[ $skip != *" sanitizer "* ]]; then
    log "== compute-sanitizer on the nn kernels' tests (small shapes)"
    tests=bundle/libexec/stoke/tests
    if command -v compute-sanitizer > /dev/null; then
      step 120 compute-sanitizer --tool memcheck --error-exitcode 9 "$tests/nn_cuda_backend_gpu_test" \
        --gtest_filter='*BatchNorm*:*Pool*:*Elementwise*:*Conv*' --gtest_brief=1
      step 90 compute-sanitizer --tool racecheck --error-exitcode 9 "$tests/nn_cuda_backend_gpu_test" \
        --gtest_filter='*BatchNorm*:*Pool*:*Loss*' --gtest_brief=1
      # Without the test that runs the device out of memory on purpose (memcheck reports that failed cudaMalloc).
      step 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$tests/device_stages_gpu_test" --gtest_brief=1 \
        --gtest_filter='-*OutOfDeviceMemory*'
      step 60 compute-sanitizer --tool memcheck --error-exitcode 9 "$tests/convert_gpu_test" --gtest_brief=1
    else
      log "compute-sanitizer not found"
    fi
  fi
  log "gpu-checks: done"
}

main 2>&1 | tee "$out/checks.log"
failures=$(failed_steps)
log "gpu-checks: $failures steps failed" | tee -a "$out/checks.log"
[[ $failures -eq 0 ]]
