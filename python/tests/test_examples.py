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
