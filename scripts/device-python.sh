#!/usr/bin/env bash
# The Python module on a GPU machine (issue 23), in one command for a short device lease: the
# module's tests with the C ABI binding (the GPU machines' Python is not the one the pybind11
# extension is built for), then examples/pytorch/train.py on CUDA, stoke.Loader(device="cuda")
# against DataLoader(pin_memory=True) + .to(device, non_blocking=True), at 48 and 224 px, on a photo
# corpus made there. Run it through scripts/run-on-device.sh, which sets the library path:
#
#   run (carry bundle.tar.xz): RUN_TESTS=0 scripts/run-on-device.sh scripts/device-python.sh
#
# Logs and JSON lines go to $OUT (default out/device-python). Environment: PYTHON (default python3),
# WORKERS (DataLoader num_workers settings, default 4,8,16), REPEAT (rounds, default 3), SKIP
# (space-separated steps to skip: tests loader ceiling profile t48 t224), T224_WORKERS (default: the last of
# WORKERS), T224_REPEAT (default 1), T224_EPOCHS (default 3), STOKE_COMMIT (the commit to print),
# TESTS_K (a pytest -k expression: only those tests, e.g. "cuda").
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2

out=${OUT:-out/device-python}
mkdir -p "$out"
python=${PYTHON:-python3}
work=${WORK:-/tmp/stoke-device-python}
skip=" ${SKIP:-} "
workers=${WORKERS:-4,8,16}
repeat=${REPEAT:-3}
export PYTHONPATH=$PWD/bundle/python STOKE_BINDING=ctypes PYTHONUNBUFFERED=1
source scripts/lib/device-steps.sh  # log, step, failed_steps

log "device-python: commit ${STOKE_COMMIT:-?}, $(nproc) cores"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
"$python" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
"$python" -c 'import stoke; print("stoke binding:", stoke.binding.__name__)' || exit 1

corpus=$work/photos
if [[ ! -d $corpus/val ]]; then
  step 120 "$python" scripts/make-photo-corpus.py --out "$corpus/train" --count 1200 \
    --label-by source-half --jobs "$(nproc)" > "$out/corpus.log" 2>&1 &&
  step 60 "$python" scripts/make-photo-corpus.py --out "$corpus/val" --count 300 \
    --label-by source-half --seed 1 --jobs "$(nproc)" >> "$out/corpus.log" 2>&1 || { tail -5 "$out/corpus.log"; exit 1; }
  tail -1 "$out/corpus.log"
fi

if [[ $skip != *" tests "* ]]; then
  log "== the module's tests (C ABI binding; the CUDA ones run here)"
  STOKE_CLI=$PWD/bundle/bin/stoke STOKE_REFERENCE=$PWD/bundle/libexec/stoke/stoke_reference_batches step 180 "$python" -m pytest -q -p no:cacheprovider -rs python/tests ${TESTS_K:+-k "$TESTS_K"} \
    --junitxml="$out/python-tests.xml" 2>&1 | tail -15
fi

if [[ $skip != *" loader "* ]]; then
  log "== the loaders alone at 224 px (no model): batches on the GPU, then in host memory"
  for device in cuda cpu; do
    step 120 "$python" examples/pytorch/bench_loader.py --data "$corpus/train" --size 224 --epochs 3 \
      --workers "${workers##*,}" --device "$device" 2>&1 | tee -a "$out/loader.log"
  done
fi

if [[ $skip != *" ceiling "* ]]; then
  log "== the model alone: training steps on one synthetic batch kept on the GPU (the loop's ceiling)"
  step 120 "$python" - <<'PY' 2>&1 | tee "$out/ceiling.log"
import os, sys, time
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
sys.path.insert(0, "examples/pytorch")
import torch, torch.nn.functional as F
from train import SmallCNN
for size in (48, 224):
    model = SmallCNN(12).cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    x = torch.randn(64, 3, size, size, device="cuda").contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 12, (64,), device="cuda")
    def steps(n):
        for _ in range(n):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        torch.cuda.synchronize()
    steps(10)
    begin = time.perf_counter(); steps(100); seconds = time.perf_counter() - begin
    print(f"model alone at {size} px: {100 * 64 / seconds:.0f} images/s ({seconds * 10:.2f} ms a step of 64)")
PY
fi

if [[ $skip != *" profile "* ]]; then
  log "== where a step's host time goes: train.py --profile 20 on CUDA at 48 px (tables here, traces in $out)"
  step 180 "$python" examples/pytorch/train.py --data "$corpus" --device cuda --loader both --epochs 2 \
    --workers "${workers##*,}" --torch-threads 1 --profile 20 --profile-dir "$out" 2>&1 | tee "$out/profile.log"
fi

if [[ $skip != *" t48 "* ]]; then
  log "== train.py on CUDA at 48 px: stoke.Loader(device='cuda') vs DataLoader num_workers $workers"
  step 300 "$python" examples/pytorch/train.py --data "$corpus" --device cuda --loader both --epochs 8 \
    --workers "$workers" --torch-threads 1 --repeat "$repeat" 2>&1 | tee "$out/train48.log"
fi

if [[ $skip != *" t224 "* ]]; then
  log "== train.py on CUDA at 224 px"
  step 240 "$python" examples/pytorch/train.py --data "$corpus" --device cuda --loader both --epochs "${T224_EPOCHS:-3}" \
    --size 224 --resize 256 --workers "${T224_WORKERS:-${workers##*,}}" --torch-threads 1 --repeat "${T224_REPEAT:-1}" \
    2>&1 | tee "$out/train224.log"
fi
failures=$(failed_steps)
log "device-python: done ($failures steps failed)"
[[ $failures -eq 0 ]]
