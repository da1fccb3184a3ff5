"""Builds the `stoke` package's two bindings with CMake and puts them beside its Python files.

`pip install --no-build-isolation ./python` (pyproject.toml) runs this. The bindings are the
pybind11 extension stoke._native, built for the Python that runs pip (a venv's included), and
libstoke_c.so, the C ABI that stoke._cabi loads with ctypes. What they are built from:

- by default, stoke's C++ sources in this repository (the folder above this one): CMake
  configures the whole project with the Python module required and without tests or examples,
  and builds the two targets (a few minutes on 2 cores; `pip install -v` shows CMake's output);
- with STOKE_PREFIX=<dir>, an installed stoke (`cmake --install <build> --prefix <dir>`): only
  the module's own sources are compiled, against it.

Environment: STOKE_PREFIX (above); STOKE_BUILD_DIR, the CMake build folder (default: under
setuptools' build folder, so that a second install rebuilds only what changed);
CMAKE_BUILD_PARALLEL_LEVEL, the build's jobs (default: the CPUs); STOKE_CMAKE_ARGS, more
arguments for CMake's configure (e.g. "-DSTOKE_CUDA=OFF").
"""

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
REPOSITORY = HERE.parent


class CMakeBuilt(Extension):
    """A binding CMake builds: `target` makes `filename` in <build>/python/stoke (in the whole
    project's build) or <build>/stoke (in the module's own)."""

    def __init__(self, name, target, filename=None):
        super().__init__(name, sources=[])
        self.target = target
        self.filename = filename


class BuildWithCMake(build_ext):
    def run(self):
        build_dir, output_dir = self.configure()
        targets = [ext.target for ext in self.extensions]
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL") or str(os.cpu_count() or 2)
        self.announce(f"stoke: building {', '.join(targets)} in {build_dir}", level=3)
        run(["cmake", "--build", str(build_dir), "--target", *targets, "--parallel", jobs])
        for ext in self.extensions:
            built = output_dir / (ext.filename or Path(self.get_ext_filename(ext.name)).name)
            if not built.exists():
                sys.exit(f"stoke: the build made no {built} (target {ext.target}); see CMake's output above")
            destination = Path(self.get_ext_fullpath(ext.name))
            if ext.filename:
                destination = destination.with_name(ext.filename)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(built, destination)

    def configure(self):
        """Configures the CMake build (once per build folder) and returns it and the folder the
        bindings land in."""
        prefix = os.environ.get("STOKE_PREFIX", "")
        build_dir = Path(os.environ.get("STOKE_BUILD_DIR") or Path(self.build_temp) / "cmake").resolve()
        args = ["-DCMAKE_BUILD_TYPE=Release", f"-DPython_EXECUTABLE={sys.executable}"]
        if prefix:
            source, output_dir = HERE, build_dir / "stoke"
            args += [f"-DCMAKE_PREFIX_PATH={Path(prefix).resolve()}", "-DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF"]
        else:
            if not (REPOSITORY / "CMakeLists.txt").exists() or not (REPOSITORY / "train").is_dir():
                sys.exit(f"stoke: stoke's C++ sources are not beside this package ({REPOSITORY}): install it from a "
                         "clone of the repository (pip install --no-build-isolation ./python), or set STOKE_PREFIX "
                         "to an installed stoke (cmake --install <build> --prefix <dir>)")
            source, output_dir = REPOSITORY, build_dir / "python" / "stoke"
            args += ["-DSTOKE_PYTHON=ON", "-DSTOKE_BUILD_TESTS=OFF", "-DSTOKE_BUILD_EXAMPLES=OFF"]
        args += shlex.split(os.environ.get("STOKE_CMAKE_ARGS", ""))
        if shutil.which("cmake") is None:
            sys.exit("stoke: building the package needs CMake 3.25 or later and a C++20 compiler "
                     "(Debian: scripts/install-deps.sh --python installs them)")
        build_dir.mkdir(parents=True, exist_ok=True)
        self.announce(f"stoke: configuring {source} in {build_dir}", level=3)
        run(["cmake", "-S", str(source), "-B", str(build_dir), *args])
        return build_dir, output_dir


def run(command):
    print("stoke:", shlex.join(command), flush=True)
    try:
        subprocess.run(command, check=True)
    except subprocess.CalledProcessError as error:
        sys.exit(f"stoke: `{shlex.join(command)}` failed (exit code {error.returncode}); its output is above "
                 "(pip install -v shows it)")


setup(
    ext_modules=[
        CMakeBuilt("stoke._native", "stoke_python"),
        CMakeBuilt("stoke._stoke_c", "stoke_c", filename="libstoke_c.so"),
    ],
    cmdclass={"build_ext": BuildWithCMake},
)
