"""The PyTorch examples run end to end on a tiny dataset (their figures are benchmarks' business)."""

import json
import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "pytorch"


def run_example(script, *args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run([sys.executable, str(EXAMPLES / script), *args], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=300)
    assert done.returncode == 0, done.stdout
    return done.stdout


def test_train_runs_both_loaders_from_the_same_weights(shapes):
    out = run_example("train.py", "--data", str(shapes.parent), "--loader", "both", "--epochs", "1", "--size", "16",
                      "--resize", "16", "--batch", "8", "--workers", "0", "--torch-threads", "1")
    runs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["loader"] for r in runs] == ["stoke", "torch"]
    assert runs[0]["images"] == runs[1]["images"] == 24
    assert "ratio stoke / DataLoader's best" in out


def cpu_flags():
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])


def test_train_runs_the_step_in_the_precision_asked_and_auto_follows_the_cpu(shapes):
    common = ("--data", str(shapes.parent), "--epochs", "1", "--size", "16", "--resize", "16", "--batch", "8",
              "--workers", "0", "--torch-threads", "1", "--stoke-threads", "1")

    def runs(*args):
        out = run_example("train.py", *common, *args)
        return out, [json.loads(line) for line in out.splitlines() if line.startswith("{")]

    out, both = runs("--loader", "both", "--precision", "bf16")
    assert [r["precision"] for r in both] == ["bf16", "bf16"]
    assert "the step in bf16" in out
    # The same batches and initial weights: only the step's arithmetic differs, and the loss shows it.
    _, fp32 = runs("--loader", "stoke", "--precision", "fp32")
    assert fp32[0]["precision"] == "fp32" and fp32[0]["train_loss"] != both[0]["train_loss"]
    native = not {"avx512_bf16", "amx_bf16"}.isdisjoint(cpu_flags())
    _, auto = runs("--loader", "stoke", "--precision", "auto")
    assert auto[0]["precision"] == ("bf16" if native else "fp32")
    assert auto[0]["train_loss"] == (both[0] if native else fp32[0])["train_loss"]


def test_bench_loader_prints_both_loaders_and_the_ratios(shapes):
    out = run_example("bench_loader.py", "--data", str(shapes), "--size", "16", "--batch", "8", "--epochs", "2",
                      "--workers", "1")
    runs = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [r["images"] for r in runs] == [48, 48]
    assert len(runs[0]["rss_mib_per_epoch"]) == 2 and runs[1]["peak_pss_mib"] > 0
    assert "peak PSS" in out


def test_train_profiles_steps_with_the_loaders_waits_marked(shapes, tmp_path):
    out = run_example("train.py", "--data", str(shapes.parent), "--loader", "stoke", "--epochs", "5", "--size", "16",
                      "--resize", "16", "--batch", "8", "--profile", "2", "--profile-dir", str(tmp_path))
    assert "== profile-stoke: 2 steps" in out
    assert "next batch" in out and "aten::convolution" in out
    trace = json.loads((tmp_path / "profile-stoke.json").read_text())
    events = trace["traceEvents"] if isinstance(trace, dict) else trace  # (torch 1.13 on a CPU: a bare list)
    assert any(event.get("name") == "next batch" for event in events)


MALLOC_PROBE = r"""
import ctypes, ctypes.util, json, sys
sys.path.insert(0, sys.argv[1])
import train

class MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                      "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.mallinfo2.restype = MallInfo2
took = train.keep_freed_memory() if sys.argv[2] == "keep" else None
size = 24 << 20  # an activation-sized block, above glibc's default thresholds and below the kept ones
before = libc.mallinfo2()
block = libc.malloc(size)
ctypes.memset(block, 1, size)
held = libc.mallinfo2()
libc.free(block)
after = libc.mallinfo2()
print(json.dumps({"took": took, "mapped": held.hblkhd - before.hblkhd, "free_in_heap": after.fordblks}))
"""


def malloc_probe(mode):
    done = subprocess.run([sys.executable, "-c", MALLOC_PROBE, str(EXAMPLES), mode], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=120,
                          env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert done.returncode == 0, done.stdout
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_train_keeps_the_memory_torch_frees_in_the_heap():
    # glibc's defaults: the block is mapped on its own and given back to the kernel when freed.
    default = malloc_probe("default")
    assert default["mapped"] >= 24 << 20
    # --malloc keep (train.py's default): it comes from the heap and stays there, free, for the next step.
    keep = malloc_probe("keep")
    assert keep["took"] is True
    assert keep["mapped"] == 0 and keep["free_in_heap"] >= 24 << 20
