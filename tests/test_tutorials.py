"""The course (`tutorials/`): every notebook runs from start to end (a cell that raises fails the suite), and
has what a classroom needs: learning goals and its time first, exercises last, solutions that the student
version removes, SmolLM2 cells marked, every figure drawn by code. The executed notebooks go to
docs/tutorials/, where the docs site renders them."""

import importlib.util
from pathlib import Path

import nbformat
import pytest
import torch

import mtdecode

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("course_build", ROOT / "tutorials" / "build.py")
build = importlib.util.module_from_spec(spec)
spec.loader.exec_module(build)


def test_the_course_has_the_seven_notebooks_in_order():
    assert [name[:2] for name in build.NOTEBOOKS] == ["01", "02", "03", "04", "05", "06", "07"]


@pytest.mark.parametrize("name", build.NOTEBOOKS)
def test_the_notebook_runs_and_has_what_a_classroom_needs(name):
    # raises if any cell raises, or if a check cell lets its `wrong` answer pass
    notebook, _ = build.execute(name, threads=torch.get_num_threads(), probe=True)
    build.EXECUTED.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook, build.EXECUTED / f"{name}.ipynb")  # for the docs build that follows in `make test`

    cells = notebook.cells
    opening, markdown = cells[0].source, [c.source for c in cells if c.cell_type == "markdown"]
    assert "**Learning goals.**" in opening and "**Time:**" in opening and "**Prerequisites:**" in opening
    sections = [line for text in markdown for line in text.splitlines() if line.startswith("## ")]
    assert sections[-1] == "## Exercises", "the exercises come last"
    solutions = [c for c in cells if "solution" in c.metadata.get("tags", [])]
    assert solutions and all(c.metadata["jupyter"]["source_hidden"] for c in solutions)
    assert_graded_exercises(name, cells)
    student = build.student_version(notebook)
    assert not any("solution" in c.metadata.get("tags", []) for c in student.cells)
    assert len(student.cells) == len(cells)
    assert not any("![" in text for text in markdown), "figures are drawn by code, not pasted"
    for i, cell in enumerate(cells):  # a cell that loads SmolLM2 follows a markdown cell that says so
        if cell.cell_type == "code" and "load_model(" in cell.source:
            said = [c.source for c in cells[:i] if c.cell_type == "markdown"][-1]
            assert "SmolLM2" in said, f"cell {i} uses SmolLM2 without saying so"


def assert_graded_exercises(name: str, cells) -> None:
    """Each exercise ("**Exercise 4.2.**") is followed by its own answer cell (tagged `solution`, naming the answers it
    assigns) and its own check cell (tagged `check`) that uses those answers, before the next exercise."""
    number = str(int(name[:2]))
    exercise = [i for i, c in enumerate(cells) if c.cell_type == "markdown" and f"**Exercise {number}." in c.source]
    assert exercise, f"notebook {name} has no graded exercise"
    for start, end in zip(exercise, [*exercise[1:], len(cells)], strict=True):
        block = cells[start + 1 : end]
        tags = [c.metadata.get("tags", []) for c in block]
        assert sum("solution" in t for t in tags) == 1 and sum("check" in t for t in tags) == 1, cells[start].source
        solution = next(c for c, t in zip(block, tags, strict=True) if "solution" in t)
        check = next(c for c, t in zip(block, tags, strict=True) if "check" in t)
        names = build.answer_names(solution)
        assert names and all(n in check.source for n in names), f"the check of {cells[start].source!r} ignores {names}"
        assert "course.check" in check.source and check.metadata.get("wrong")


def test_a_check_refuses_a_wrong_answer_and_a_missing_one():
    from mtdecode import course

    course.check("0.1", [3, 4], [3, 4], hint="")
    course.check("0.2", 0.31, 0.3, hint="", tolerance=0.02)
    course.check("0.3", " B", "b", hint="")
    for answer, expected in [([3, 5], [3, 4]), ([3], [3, 4]), (0.35, 0.3), ("a", "b"), (1, True)]:
        with pytest.raises(course.WrongAnswer, match="Exercise 0.4: not yet. Hint: look again"):
            course.check("0.4", answer, expected, hint="look again", tolerance=0.02)
    with pytest.raises(course.NotAnswered):
        course.check("0.5", ..., 3, hint="")


def test_a_student_version_leaves_the_answers_to_fill_in():
    notebook = nbformat.v4.new_notebook()
    solution = nbformat.v4.new_code_cell("iterations = 3\nwhy = 'b'")
    solution.metadata.update(tags=["solution"], answer="iterations, why")
    notebook.cells = [solution]
    (blank,) = build.student_version(notebook).cells
    assert blank.source == "iterations = ...  # your answer here\nwhy = ...  # your answer here"


# ------------------------------------------------------------------ notebook 4's n-gram pool cell

#: the pool cell notebook 4 had until it was fixed: it paired two iterations' guesses for the SAME position
OLD_POOL_CELL = """\
pool = NgramPool(per_key=4)
for upper, lower, prediction in zip(trajectory, trajectory[1:], trajectory[2:], strict=False):
    pool.add_columns([upper[:-1], lower[:-1]], prediction[1:])
"""
NONE = -1  # a position an iteration did not compute


def pool_cell_source() -> str:
    """The code of notebook 4's cell tagged `ngram-pool`."""
    import jupytext

    notebook = jupytext.read(ROOT / "tutorials" / "04_jacobi_and_lookahead.py")
    (cell,) = [c for c in notebook.cells if "ngram-pool" in c.metadata.get("tags", [])]
    return cell.source


def lookahead_run(monkeypatch, window: int, ngram: int, prompt: list[int], new_tokens: int):
    """Run `Lookahead(window, ngram, guesses=0)` on a tiny model and record its Jacobi trajectory step by step: the
    row the window started with, and each step's x0 position, window depth and new row. Also return the n-grams the
    window's columns gave its pool, but those of column 0, which start with the committed token x0 rather than a
    Jacobi guess. With no guesses verified, every step commits one token, so the window moves on one position per
    step, as a trajectory stored by position does."""
    from mtdecode.strategies import Lookahead, lookahead
    from mtdecode.testing import tiny_model

    steps, collected = [], set()
    real_step, real_add = lookahead.lookahead_step, lookahead.NgramPool.add_columns

    def recording_step(s, window, candidates):
        p = len(s.tokens[0]) - 1  # the position of x0
        first = window.rows[0][0].tolist() if not steps else None  # iteration 0: the window's starting row
        done, new_row, verdict = real_step(s, window, candidates)
        steps.append((p, len(window.rows), first, new_row[0].tolist()))
        return done, new_row, verdict

    def recording_add(pool, grid, new_row):
        columns = [[row[j] for row in grid] + [new_row[j]] for j in range(len(new_row))]
        collected.update(tuple(column) for column in columns[1:])
        real_add(pool, grid, new_row)

    model = tiny_model(vocab_size=16, seed=3)
    with monkeypatch.context() as patch:
        patch.setattr(lookahead, "lookahead_step", recording_step)
        patch.setattr(lookahead.NgramPool, "add_columns", recording_add)
        result = mtdecode.generate(model, prompt, Lookahead(window, ngram, 0, prompt_pool=False),
                                   max_new_tokens=new_tokens, seed=0)
    assert all(len(step.tokens) == 1 for step in result.steps)  # one position per step
    return steps, collected


def trajectory_by_position(steps, ngram: int) -> list[list[int]]:
    """The run's Jacobi iterations stored by position, as notebook 4 stores its own: `trajectory[i][j]` is iteration
    i's guess for position j, `NONE` where iteration i guessed nothing. Iteration 0 is the window's starting row,
    iteration t + 1 the row step t predicted, except the last step's (decoding ended before it reached the pool).
    Where the window put x0, the committed token, in place of a guess (cell (0, 0): row 0 is iteration
    t - N + 2 once warmed up), the cell is `NONE` too: column 0's n-grams are not Jacobi n-grams."""
    p, _, first, _ = steps[0]
    iterations = [{p + 1 + k: token for k, token in enumerate(first)}]
    for p, rows, _, new_row in steps[:-1]:
        iterations.append({p + rows + j: token for j, token in enumerate(new_row)})
    for t, (p, *_) in enumerate(steps):
        iterations[max(0, t - ngram + 2)][p] = NONE
    start = min(min(it) for it in iterations)
    end = max(max(it) for it in iterations)
    return [[it.get(position, NONE) for position in range(start, end + 1)] for it in iterations]


def notebook_ngrams(cell: str, trajectory: list[list[int]]) -> set[tuple[int, ...]]:
    """Run a pool cell on `trajectory`; the n-grams its pool holds, without those that touch an uncomputed cell."""
    from mtdecode.strategies.lookahead import NgramPool

    class Unbounded(NgramPool):
        def __init__(self, per_key):
            super().__init__(per_key=10**6)

    namespace = {"NgramPool": Unbounded, "trajectory": trajectory}
    exec(cell, namespace)
    held = {(key, *rest) for key, rests in namespace["pool"].table.items() for rest in rests}
    return {ngram for ngram in held if NONE not in ngram}


@pytest.mark.parametrize("window", [2, 4])
def test_notebook_4_ngrams_are_those_lookahead_collects(monkeypatch, window):
    """Notebook 4's pool cell, run on the Jacobi trajectory of a real `Lookahead` run stored by position, finds
    exactly the n-grams that `Lookahead`'s window gave its pool. The cell the notebook had before (same position,
    two iterations) does not: the negative control shows that this test can fail."""
    prompt = [1, 5, 2, 9, 4, 4, 7, 3, 1, 5]
    steps, collected = lookahead_run(monkeypatch, window, 3, prompt, new_tokens=12)
    trajectory = trajectory_by_position(steps, ngram=3)
    assert len(collected) >= window  # the run collected n-grams for the comparison to mean something
    assert notebook_ngrams(pool_cell_source(), trajectory) == collected
    assert notebook_ngrams(OLD_POOL_CELL, trajectory) != collected
