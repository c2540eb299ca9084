"""The course's notebooks: run them, and make the student versions.

The notebooks are stored as jupytext percent scripts (`tutorials/NN_name.py`), so that a review
sees code, not JSON. This script turns them into notebooks:

    python tutorials/build.py run [NAMES...]   # execute each; write docs/tutorials/NN_name.ipynb, with outputs
    python tutorials/build.py students OUT     # student versions in OUT: solutions removed, nothing executed

A cell tagged `solution` holds an exercise's answer. In the executed notebook it stays, folded
(`jupyter.source_hidden`); in a student version it becomes an empty cell that says so. `make test`
runs every notebook through `tests/test_tutorials.py` (a notebook that raises fails the suite),
and the docs site renders the executed ones (mkdocs-jupyter).
"""

import argparse
import os
import sys
import time
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
EXECUTED = HERE.parent / "docs" / "tutorials"
#: the learning path, in order
NOTEBOOKS = sorted(path.stem for path in HERE.glob("[0-9][0-9]_*.py"))


def read(name: str) -> nbformat.NotebookNode:
    """The notebook of `tutorials/<name>.py`, solutions folded."""
    notebook = jupytext.read(HERE / f"{name}.py")
    for cell in notebook.cells:
        if "solution" in cell.metadata.get("tags", []):
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return notebook


def execute(name: str, *, threads: int | None = None, timeout: int = 600) -> tuple[nbformat.NotebookNode, float]:
    """Run every cell of a notebook, in the tutorials folder; return it with its outputs, and the seconds it took.
    `threads` caps the kernel's torch threads (OMP_NUM_THREADS), for running several notebooks side by side.

    **Raises:** nbclient's `CellExecutionError` if a cell raises.
    """
    notebook = read(name)
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    client = NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}
    )
    start = time.perf_counter()
    client.execute(env=env)
    return notebook, time.perf_counter() - start


def student_version(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook without its solutions: each solution cell becomes an empty code cell saying what to do."""
    student = nbformat.from_dict(notebook)
    cells = []
    for cell in student.cells:
        if "solution" in cell.metadata.get("tags", []):
            cell = nbformat.v4.new_code_cell("# your answer here")
        cells.append(cell)
    student.cells = cells
    return student


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="execute the notebooks into docs/tutorials/")
    run.add_argument("names", nargs="*", default=NOTEBOOKS)
    students = commands.add_parser("students", help="write the student versions (no solutions)")
    students.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        EXECUTED.mkdir(parents=True, exist_ok=True)
        for name in args.names:
            notebook, seconds = execute(name)
            nbformat.write(notebook, EXECUTED / f"{name}.ipynb")
            print(f"{name}: {seconds:.1f} s", flush=True)
    else:
        args.out.mkdir(parents=True, exist_ok=True)
        for name in NOTEBOOKS:
            nbformat.write(student_version(read(name)), args.out / f"{name}.ipynb")
            print(args.out / f"{name}.ipynb")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
