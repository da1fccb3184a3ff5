"""Fixtures of the stoke Python module's tests: a tiny shapes dataset written by `stoke gen-shapes`."""

import os
import shutil
import subprocess

import pytest


def stoke_cli():
    cli = os.environ.get("STOKE_CLI") or shutil.which("stoke")
    if not cli:
        pytest.exit("the tests need the stoke command: set STOKE_CLI (ctest does)", returncode=2)
    return cli


@pytest.fixture(scope="session")
def shapes(tmp_path_factory):
    """An ImageFolder of 2 classes x 12 images of 16 px shapes (JPEG): <root>/train."""
    root = tmp_path_factory.mktemp("shapes") / "shapes"
    subprocess.run([stoke_cli(), "gen-shapes", "--out", str(root), "--classes", "2", "--train", "12", "--val", "2",
                    "--size", "16"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return root / "train"


@pytest.fixture
def shapes_copy(shapes, tmp_path):
    """A copy of the dataset that a test may damage."""
    copy = tmp_path / "train"
    shutil.copytree(shapes, copy)
    return copy
