"""The course's notebooks: run them, and make the student versions.

The notebooks are stored as jupytext percent scripts (`tutorials/NN_name.py`), so that a review
sees code, not JSON. This script turns them into notebooks:

    python tutorials/build.py run [NAMES...]   # execute each; write docs/tutorials/NN_name.ipynb, with outputs
    python tutorials/build.py students OUT     # student versions in OUT: solutions removed, nothing executed

Exercises are graded (`mtdecode.course`). A cell tagged `solution` holds an exercise's answer; its
`answer` metadata names the variables it assigns (`# %% tags=["solution"] answer="iterations"`). In the
executed notebook it stays, folded (`jupyter.source_hidden`, and a `<details>` block on the docs site);
in a student version it becomes `iterations = ...  # your answer here`. A cell tagged `check` grades the
answer; its `wrong` metadata is a wrong answer that the check must refuse, which `tests/test_tutorials.py`
tries (`with_wrong_answers`). `make test` runs every notebook through that test (a notebook that raises
fails the suite), and the docs site renders the executed ones (mkdocs-jupyter).
"""

import argparse
import os
import sys
import textwrap
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


def execute(
    name: str, *, threads: int | None = None, timeout: int = 600, probe: bool = False
) -> tuple[nbformat.NotebookNode, float]:
    """Run every cell of a notebook, in the tutorials folder; return it with its outputs, and the seconds it took.
    `threads` caps the kernel's torch threads (OMP_NUM_THREADS), for running several notebooks side by side;
    `probe` also tries each check cell's wrong answer (`with_wrong_answers`) and leaves those cells out again.

    **Raises:** nbclient's `CellExecutionError` if a cell raises, or if a check passes a wrong answer.
    """
    notebook = with_wrong_answers(read(name)) if probe else read(name)
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    client = NotebookClient(
        notebook, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(HERE)}}
    )
    start = time.perf_counter()
    client.execute(env=env)
    return without_probes(notebook), time.perf_counter() - start


def answer_names(cell: nbformat.NotebookNode) -> list[str]:
    """The variables a solution cell assigns, from its `answer` metadata (`"iterations, speedup"`)."""
    return [name.strip() for name in cell.metadata.get("answer", "").split(",") if name.strip()]


def student_version(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook without its solutions: each solution cell becomes its answers set to `...`, to fill in."""
    student = nbformat.from_dict(notebook)
    cells = []
    for cell in student.cells:
        if "solution" in cell.metadata.get("tags", []):
            blanks = [f"{name} = ...  # your answer here" for name in answer_names(cell)]
            cell = nbformat.v4.new_code_cell("\n".join(blanks) or "# your answer here")
        cells.append(cell)
    student.cells = cells
    return student


#: the marker of the cells `with_wrong_answers` appends, so that `without_probes` can take them out again
PROBE = "# probe: a wrong answer must fail its check"


def with_wrong_answers(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook with one cell appended per check cell: it sets the check's `wrong` answer, runs the check,
    and raises if the check let the wrong answer pass. The solutions' own values are restored after each."""
    probed = nbformat.from_dict(notebook)
    for cell in notebook.cells:
        if "check" not in cell.metadata.get("tags", []):
            continue
        wrong = cell.metadata.get("wrong")
        if not wrong:
            raise ValueError(f"check cell without a `wrong` answer to try:\n{cell.source}")
        probe = f"""{PROBE}
import mtdecode.course as _course
_saved = dict(globals())
{wrong}
try:
{textwrap.indent(cell.source, "    ")}
except _course.WrongAnswer:
    pass
else:
    raise RuntimeError({cell.source.splitlines()[0]!r} + ": the check passed the wrong answer " + {wrong!r})
globals().update(_saved)
"""
        probed.cells.append(nbformat.v4.new_code_cell(probe))
    return probed


def without_probes(notebook: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The notebook without the cells `with_wrong_answers` appended."""
    clean = nbformat.from_dict(notebook)
    clean.cells = [cell for cell in clean.cells if not cell.source.startswith(PROBE)]
    return clean


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
