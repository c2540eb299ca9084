"""The course (`tutorials/`): every notebook runs from start to end (a cell that raises fails the suite), and
has what a classroom needs: learning goals and its time first, exercises last, solutions that the student
version removes, SmolLM2 cells marked, every figure drawn by code. The executed notebooks go to
docs/tutorials/, where the docs site renders them."""

import importlib.util
from pathlib import Path

import nbformat
import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("course_build", ROOT / "tutorials" / "build.py")
build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build)


def test_the_course_has_the_seven_notebooks_in_order():
    assert [name[:2] for name in build.NOTEBOOKS] == ["01", "02", "03", "04", "05", "06", "07"]


@pytest.mark.parametrize("name", build.NOTEBOOKS)
def test_the_notebook_runs_and_has_what_a_classroom_needs(name):
    notebook, _ = build.execute(name, threads=torch.get_num_threads())  # raises if any cell raises
    build.EXECUTED.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, build.EXECUTED / f"{name}.ipynb")  # for the docs build that follows in `make test`

    cells = notebook.cells
    opening, markdown = cells[0].source, [c.source for c in cells if c.cell_type == "markdown"]
    assert "**Learning goals.**" in opening and "**Time:**" in opening and "**Prerequisites:**" in opening
    assert any("## Exercises" in text for text in markdown[-2:])
    solutions = [c for c in cells if "solution" in c.metadata.get("tags", [])]
    assert solutions and all(c.metadata["jupyter"]["source_hidden"] for c in solutions)
    student = build.student_version(notebook)
    assert not any("solution" in c.metadata.get("tags", []) for c in student.cells)
    assert len(student.cells) == len(cells)
    assert not any("![" in text for text in markdown), "figures are drawn by code, not pasted"
    for i, cell in enumerate(cells):  # a cell that loads SmolLM2 follows a markdown cell that says so
        if cell.cell_type == "code" and "load_model(" in cell.source:
            said = [c.source for c in cells[:i] if c.cell_type == "markdown"][-1]
            assert "SmolLM2" in said, f"cell {i} uses SmolLM2 without saying so"
