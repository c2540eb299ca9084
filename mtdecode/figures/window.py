"""Lookahead's window, drawn from a real run (`record_steps`, `lookahead_window`)."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from matplotlib.axes import Axes
from matplotlib.figure import Figure

from mtdecode.figures.draw import (
    ACCEPTED,
    COLUMN_COLOURS,
    COMMITTED,
    GUESS,
    PATH,
    PREDICTION,
    TARGET_TOKEN,
    arrow,
    cell,
    rows_axis,
)


@dataclass(frozen=True)
class LookaheadStep:
    """One lookahead step of a real run, as token texts (`record_steps`).

    - `window`: the N-1 rows of W cells the step fed; cell (r, j) sits at position s + r + j, where s is the
      position of x0 = `window[0][0]`, the newest committed token.
    - `predictions`: the target's prediction after each cell of the last row: the next Jacobi row.
    - `candidates`: the pool's n-grams keyed by x0 that the step verified (the verification branch).
    - `chosen`, `accepted`: the candidate whose first `accepted` tokens were accepted (-1 and 0: none).
    - `committed`: the tokens the step committed (the accepted ones, then the target's own).
    - `full`: the window had its N-1 rows, so the step gave the pool its W n-grams (not during warm-up).
    """

    window: list[list[str]]
    predictions: list[str]
    candidates: list[list[str]]
    chosen: int
    accepted: int
    committed: list[str]
    full: bool


def watch_window(real: Callable, records: list[LookaheadStep], text: Callable[[int], str]) -> Callable:
    """`lookahead_step` as it is (`real`), which also appends each step of row 0 to `records` (`record_steps`)."""

    def watched(s, window, candidates):
        grid = window.grid(s.last_tokens)[0].tolist()  # before the step commits: cell (0, 0) is x0
        full = window.full
        steps, new_row, verdict = real(s, window, candidates)
        found = [[token for token in candidate if token >= 0] for candidate in candidates[0].tolist()]
        accepted = int(verdict.accepted[0])
        records.append(
            LookaheadStep(
                window=[[text(token) for token in row] for row in grid],
                predictions=[text(token) for token in new_row[0].tolist()],
                candidates=[[text(token) for token in candidate] for candidate in found if candidate],
                chosen=int(verdict.candidate[0]) if accepted else -1,
                accepted=accepted,
                committed=[text(token) for token in steps[0].tokens] if steps else [],
                full=full,
            )
        )
        return steps, new_row, verdict

    return watched


def lookahead_window(
    window: Sequence[Sequence[str]],
    predictions: Sequence[str],
    candidates: Sequence[Sequence[str]] = (),
    chosen: int = -1,
    accepted: int = 0,
    *,
    committed: Sequence[str] = (),
    title: str | None = None,
) -> Figure:
    """Draw one lookahead step: the window by position, its n-grams as diagonals, and the verification branch.

    Cell (r, j) of the window is drawn at row r and position s + r + j (Fu et al., Figure 2): the guesses of one
    Jacobi iteration fill a row, and the next iteration's guess one position on was computed from it. So the
    n-gram of column j runs diagonally: (0, j), (1, j + 1), ..., (N-2, j + N-2), then the target's prediction
    below the last row. Each cell's border has its n-gram's colour. Under the window, on the same positions, each
    candidate n-gram of the verification branch follows x0; the accepted prefix is green.

    **Arguments:**

    - `window`: N-1 rows of W token texts; `window[0][0]` is x0, the newest committed token.
    - `predictions`: W token texts, the target's prediction after each cell of the last row.
    - `candidates`: the verified n-grams (token texts after x0), at most N-1 tokens each; none: no branch drawn.
    - `chosen`, `accepted`: the candidate whose first `accepted` tokens were accepted (-1 and 0: none was).
    - `committed`: the tokens the step committed, drawn under the candidates (the last one is the target's own).
    - `title`: a title above the window (default: W and N).

    **Returns:**

    The matplotlib `Figure`. Its window cells carry the gid "window" (their labels) and "ngram" (the arrows,
    one per link, W x (N-1) in all); predictions "prediction"; candidate tokens "candidate", the accepted ones
    "accepted".

    **Raises:**

    `ValueError` if the rows differ in length, `predictions` does not have one text per column, or `chosen` and
    `accepted` do not name a prefix of one of the candidates.
    """
    import matplotlib.pyplot as plt  # the current backend is left as it is (inline in notebooks)

    rows, columns = len(window), len(window[0]) if window else 0
    if rows == 0 or columns == 0 or any(len(row) != columns for row in window):
        raise ValueError(f"the window must have rows of equal, non-zero length, got lengths {[len(r) for r in window]}")
    if len(predictions) != columns:
        raise ValueError(f"{len(predictions)} predictions for a window of {columns} columns: give one per column")
    check_accepted(candidates, chosen, accepted)

    span = rows + columns  # positions s .. s + rows + columns - 1
    branch = len(candidates) + (1.5 if committed else 0)  # rows of the verification branch
    heights = [rows + 1, branch] if candidates else [rows + 1]
    fig, axes = plt.subplots(len(heights), 1, figsize=(0.9 * span + 1.9, 0.72 * sum(heights) + 1.3 * len(heights)),
                             gridspec_kw={"height_ratios": heights}, squeeze=False)  # fmt: skip
    ax = axes[0][0]
    for r, row in enumerate(window):
        for j, token in enumerate(row):
            colour = COLUMN_COLOURS[j % len(COLUMN_COLOURS)]
            cell(ax, r + j, r, token, COMMITTED if (r, j) == (0, 0) else GUESS, colour, "window")
    for j, token in enumerate(predictions):
        cell(ax, rows + j, rows, token, PREDICTION, COLUMN_COLOURS[j % len(COLUMN_COLOURS)], "prediction", "--")
    for j in range(columns):  # the n-gram of column j: one step down, one step right, into the prediction
        for r in range(rows):
            arrow(ax, (r + j, r), (r + j + 1, r + 1), COLUMN_COLOURS[j % len(COLUMN_COLOURS)], "ngram")
    n = rows + 1
    title = title or f"lookahead branch, W={columns}, N={n}: each diagonal is one {n}-gram for the pool"
    rows_axis(ax, span, [f"row {r}" for r in range(rows)] + ["prediction"], title)
    if candidates:
        draw_branch(axes[1][0], window[0][0], candidates, chosen, accepted, committed, span)
    fig.tight_layout()
    return fig


def draw_branch(
    ax: Axes,
    x0: str,
    candidates: Sequence[Sequence[str]],
    chosen: int,
    accepted: int,
    committed: Sequence[str],
    span: int,
) -> None:
    """The verification branch, on the window's positions: each candidate after x0 on a row of its own, the
    accepted prefix green; under them, the tokens the step committed."""
    for c, candidate in enumerate(candidates):
        cell(ax, 0, c, x0, COMMITTED, "#606060", "key")
        for k, token in enumerate(candidate):
            hit = c == chosen and k < accepted
            cell(ax, k + 1, c, token, ACCEPTED if hit else "#f5f5f5", PATH if hit else "#606060",
                 "accepted" if hit else "candidate")  # fmt: skip
    labels = [f"candidate {c}" for c in range(len(candidates))]
    if committed:
        for k, token in enumerate(committed):
            own = k == len(committed) - 1
            cell(ax, k + 1, len(candidates) + 0.5, token, TARGET_TOKEN if own else ACCEPTED, "#606060", "committed")
        labels.append("committed")
    rows_axis(ax, span, labels, "verification branch: the pool's n-grams keyed by x0, the accepted prefix green")
    if committed:
        ax.set_yticks([*range(len(candidates)), len(candidates) + 0.5], labels)
        ax.set_ylim(len(candidates) + 1.1, -0.6)


def check_accepted(candidates: Sequence[Sequence[str]], chosen: int, accepted: int) -> None:
    """Raise `ValueError` unless `chosen` and `accepted` name a prefix of a candidate (or -1 and 0: none)."""
    if chosen == -1:
        if accepted != 0:
            raise ValueError(f"accepted={accepted} tokens but no chosen candidate (chosen=-1)")
        return
    if not 0 <= chosen < len(candidates):
        raise ValueError(f"chosen={chosen} is not one of the {len(candidates)} candidates (or -1 for none)")
    if not 0 <= accepted <= len(candidates[chosen]):
        raise ValueError(f"accepted={accepted} tokens of candidate {chosen}, which has {len(candidates[chosen])}")
