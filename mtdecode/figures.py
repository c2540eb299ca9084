"""Teaching figures drawn from real runs: lookahead's window, EAGLE's token tree, a draft/verify timeline.

A function named by what it draws takes plain data (token texts, parents, step records) and
returns a matplotlib `Figure`:

- `lookahead_window`: the 2-D window of one lookahead step, each cell at its position, the
  n-grams the step gives the pool as diagonal arrows, and under it the verification branch;
- `token_tree`: the tree one EAGLE step verifies, root at the left, the accepted path highlighted;
- `timeline`: the forward passes of a few steps, one lane per model, in units of forward cost.

A `record_...` function gets that data from a real run of a strategy, without changing what it
does: `record_lookahead` and `record_eagle_trees` call the strategy's own step function
(`lookahead_step`, `verify_tree`) through a thin wrapper that copies its inputs and outputs for
the length of one `generate` call (as `tests/test_tutorials.py` records a trajectory);
`record_forwards` counts every forward of the models with PyTorch forward pre-hooks and closes a
step at each `on_step` call. Wrapping a module's function is not thread-safe: record one run at a
time.

```python
import mtdecode, mtdecode.figures
from mtdecode.strategies import Lookahead

model, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
prompt = tokenizer("The planets of the solar system, in order:")["input_ids"]
steps = mtdecode.figures.record_lookahead(model, prompt, Lookahead(4, 4, 3), max_new_tokens=24,
                                          text=mtdecode.figures.token_text(tokenizer))
step = max(steps, key=lambda s: s.accepted)
mtdecode.figures.lookahead_window(step.window, step.predictions, step.candidates, step.chosen, step.accepted)
```

The elements of each figure carry a matplotlib `gid` ("window", "ngram", "accepted", ...) so that
tests can count what was drawn.
"""

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import ModuleType

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.text import Text
from transformers import PreTrainedModel

from mtdecode.costs import curves, probes, timing
from mtdecode.generate import generate
from mtdecode.model import CausalLM
from mtdecode.strategies import eagle, lookahead
from mtdecode.strategies.eagle import Eagle
from mtdecode.strategies.lookahead import Lookahead
from mtdecode.strategy import DecodingStrategy
from mtdecode.zoo.eagle import shipped_head

#: font size of the token labels (points, at the saved size); titles and axes are one point larger
FONT = 10
#: longest token text shown in a cell; longer ones are cut with "…"
MAX_CHARS = 8
#: fill colours; every fill is light, and the labels on them are dark (`ON_FILL`) in both colour schemes of the
#: docs site, while titles, ticks and other text take matplotlib's current colour
COMMITTED, GUESS, PREDICTION, ACCEPTED, TARGET_TOKEN = "#d0d0d0", "#dbe9f6", "#fde3c4", "#b5e3ad", "#fdae6b"
ON_FILL = "#1a1a1a"
#: the accepted path's colour (edges and borders), readable on a light and on a dark background
PATH = "#2e9d3a"
#: lane colours of the timeline: fill, and the border that separates one forward from the next
LANES = {"target": ("#6baed6", "#2f6f9f"), "draft": ("#fd8d3c", "#a8501a"), "head": ("#74c476", "#2e7d32")}
#: the n-gram arrows' colours, one per window column
COLUMN_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")


def token_text(tokenizer) -> Callable[[int], str]:
    """A function that gives a token's text as the figures show it (`shown`), from `tokenizer.decode`."""

    def text(token: int) -> str:
        return shown(tokenizer.decode([token]))

    return text


def shown(piece: str) -> str:
    """`piece` made visible in a small cell: a space as ␣, a line break as ↵, a tab as ⇥, cut to `MAX_CHARS`."""
    piece = piece.replace(" ", "␣").replace("\n", "↵").replace("\t", "⇥") or "∅"
    return piece if len(piece) <= MAX_CHARS else piece[: MAX_CHARS - 1] + "…"


# ------------------------------------------------------------------ lookahead's window


@dataclass(frozen=True)
class LookaheadStep:
    """One lookahead step of a real run, as token texts (`record_lookahead`).

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


def record_lookahead(
    model: CausalLM | PreTrainedModel,
    prompt: Sequence[int],
    strategy: Lookahead,
    *,
    max_new_tokens: int,
    text: Callable[[int], str] = str,
    **options,
) -> list[LookaheadStep]:
    """Run `strategy` on one prompt and record each step's window, predictions and verification branch.

    **Arguments:**

    - `model`, `prompt`, `max_new_tokens`, `options`: as for `mtdecode.generate` (one prompt).
    - `strategy`: a `Lookahead`. A `Lookahead()` that decodes greedily on this host records nothing; give W, N
      and G to be sure of a window.
    - `text`: a token's text in the records (`token_text(tokenizer)`; the default, `str`, shows the id).

    **Returns:**

    One `LookaheadStep` per lookahead step, in order.
    """
    records = []
    real = lookahead.lookahead_step

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

    with replaced(lookahead, "lookahead_step", watched):
        generate(model, [list(prompt)], strategy, max_new_tokens=max_new_tokens, **options)
    return records


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


def rows_axis(ax: Axes, span: int, labels: Sequence[str], title: str) -> None:
    """An axis of cells: one row per label, top down, over the positions s (x0) .. s + span - 1; no frame."""
    ax.set_xlim(-0.6, span - 0.4)
    ax.set_ylim(len(labels) - 0.4, -0.6)
    ax.set_xticks(range(span), ["s (x0)"] + [f"s+{i}" for i in range(1, span)])
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("position", fontsize=FONT + 1)
    ax.tick_params(labelsize=FONT, length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    ax.set_title(title, fontsize=FONT + 1)


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


# ------------------------------------------------------------------ EAGLE's token tree


@dataclass(frozen=True)
class TreeStep:
    """The token tree one EAGLE step verified, as token texts (`record_eagle_trees`).

    - `root`: x0, the newest committed token (fed with the tree, not part of it).
    - `tokens`, `parents`: the verified nodes, parents first; `parents[i]` is node i's parent (-1: x0).
    - `accepted`: the accepted path, as node indices from the root down (maybe empty).
    - `copied`: which nodes came from prompt lookup's copy (`Eagle(lookup=...)`) rather than the head.
    - `target_token`: the token the target added after the accepted path.
    """

    root: str
    tokens: list[str]
    parents: list[int]
    accepted: list[int]
    copied: list[bool]
    target_token: str


def record_eagle_trees(
    model: CausalLM | PreTrainedModel,
    prompt: Sequence[int],
    strategy: Eagle,
    *,
    max_new_tokens: int,
    text: Callable[[int], str] = str,
    **options,
) -> list[TreeStep]:
    """Run `strategy` on one prompt and record the tree each step verified and the path it accepted.

    **Arguments:**

    - `model`, `prompt`, `max_new_tokens`, `options`: as for `mtdecode.generate` (one prompt).
    - `strategy`: an `Eagle`.
    - `text`: a token's text in the records (`token_text(tokenizer)`; the default, `str`, shows the id).

    **Returns:**

    One `TreeStep` per tree step, in order (the first step, a plain forward over the prompt, has no tree).
    """
    records = []
    real = eagle.verify_tree

    def watched(s, tree, chosen, valid):
        x0 = int(s.last_tokens[0])
        verdict, path, features = real(s, tree, chosen, valid)
        slots = [slot for slot, ok in enumerate(valid[0].tolist()) if ok]  # row 0's verified nodes, parents first
        nodes = [int(chosen[0, slot]) for slot in slots]
        index = {node: i for i, node in enumerate(nodes)}
        parents = [index.get(int(tree.parent[0, node]), -1) for node in nodes]
        on_path = [index[int(chosen[0, slot])] for slot in path[0].tolist() if slot >= 0]
        copied = [bool(tree.copy[0, node] > 0) for node in nodes] if tree.copy is not None else [False] * len(nodes)
        records.append(
            TreeStep(
                root=text(x0),
                tokens=[text(int(tree.tokens[0, node])) for node in nodes],
                parents=parents,
                accepted=on_path,
                copied=copied,
                target_token=text(int(verdict.tokens[0, int(verdict.accepted[0])])),
            )
        )
        return verdict, path, features

    with replaced(eagle, "verify_tree", watched):
        generate(model, [list(prompt)], strategy, max_new_tokens=max_new_tokens, **options)
    return records


def token_tree(
    root: str,
    tokens: Sequence[str],
    parents: Sequence[int],
    accepted: Sequence[int] = (),
    *,
    copied: Sequence[bool] | None = None,
    target_token: str | None = None,
    title: str | None = None,
) -> Figure:
    """Draw a token tree: x0 at the left, each node right of its parent, the accepted path green.

    **Arguments:**

    - `root`: the text of x0, the newest committed token the tree grows from.
    - `tokens`, `parents`: node i's text and its parent, an earlier node or -1 for x0.
    - `accepted`: the accepted path as node indices, from a child of x0 down (empty: nothing accepted).
    - `copied`: which nodes came from prompt lookup's copy; their borders are purple and dashed.
    - `target_token`: the target's own token after the accepted path, drawn orange after it.
    - `title`: a title (default: how many nodes, how many accepted).

    **Returns:**

    The matplotlib `Figure`. Node labels carry the gid "node", or "accepted" on the accepted path; edges
    "edge" or "accepted-edge"; x0 "root"; the target's token "target".

    **Raises:**

    `ValueError` if a parent is not an earlier node, or `accepted` is not a path down from x0.
    """
    import matplotlib.pyplot as plt

    check_tree(parents, accepted, len(tokens))
    if copied is not None and len(copied) != len(tokens):
        raise ValueError(f"copied has {len(copied)} entries for {len(tokens)} nodes")
    extra = [] if target_token is None else [accepted[-1] if accepted else -1]  # the target's token hangs there
    rows, depth = tree_layout([*parents, *extra])
    on_path = set(accepted)
    leaves = max(rows.values()) + 1
    deepest = max(depth.values())
    spacing = min(1.4, 11 / (deepest + 1))  # inches per depth: a long copy makes a long chain
    fig, ax = plt.subplots(figsize=(spacing * (deepest + 1) + 1.2, 0.45 * leaves + 1.3))
    labels = {-1: label(ax, 0, rows[-1], root, COMMITTED, "#404040", "root")}
    for i, token in enumerate(tokens):
        hit = i in on_path
        edge, style = ("#9b59c8", "--") if copied is not None and copied[i] else (PATH if hit else "#4a6fa5", "-")
        labels[i] = label(ax, depth[i], rows[i], token, ACCEPTED if hit else GUESS, edge, "accepted" if hit else "node",
                          style)  # fmt: skip
    if target_token is not None:
        n = len(tokens)
        labels[n] = label(ax, depth[n], rows[n], target_token, TARGET_TOKEN, "#404040", "target")
    for i, parent in enumerate([*parents, *extra]):
        hit = i in on_path or i == len(tokens)
        link(ax, labels[parent], labels[i], PATH if hit else "#8a8a8a", "accepted-edge" if hit else "edge")
    ax.set_xlim(-0.7, deepest + 0.7)
    ax.set_ylim(leaves - 0.4, -0.6)
    ax.set_xticks(range(deepest + 1), ["x0"] + [str(d) for d in range(1, deepest + 1)])
    ax.set_xlabel("depth", fontsize=FONT + 1)
    ax.set_yticks([])
    ax.tick_params(labelsize=FONT, length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    what = f"{len(tokens)} nodes verified, {len(accepted)} accepted (green)"
    what += ", then the target's own token (orange)" if extra else ""
    what += "\ndashed purple: nodes of prompt lookup's copy" if copied is not None and any(copied) else ""
    ax.set_title(title or what, fontsize=FONT + 1)
    fig.tight_layout()
    return fig


def check_tree(parents: Sequence[int], accepted: Sequence[int], nodes: int) -> None:
    """Raise `ValueError` unless every parent is an earlier node (or -1) and `accepted` is a path down from x0."""
    if len(parents) != nodes:
        raise ValueError(f"{len(parents)} parents for {nodes} nodes: give one per node")
    for i, parent in enumerate(parents):
        if not -1 <= parent < i:
            raise ValueError(f"node {i}'s parent {parent} is not an earlier node (or -1 for x0)")
    above = -1
    for node in accepted:
        if not 0 <= node < nodes:
            raise ValueError(f"accepted node {node} is not a node of the tree (0..{nodes - 1})")
        if parents[node] != above:
            where = "x0" if above == -1 else f"node {above}"
            raise ValueError(
                f"accepted {list(accepted)} is not a path down from x0: node {node} is not a child of {where}"
            )
        above = node


def tree_layout(parents: Sequence[int]) -> tuple[dict[int, float], dict[int, int]]:
    """Each node's row (leaves on consecutive rows, a parent at the middle of its children) and depth; -1 is x0."""
    children: dict[int, list[int]] = {i: [] for i in range(-1, len(parents))}
    for i, parent in enumerate(parents):
        children[parent].append(i)
    rows: dict[int, float] = {}
    depth = {-1: 0}
    for i, parent in enumerate(parents):  # parents come first
        depth[i] = depth[parent] + 1

    def place(node: int, next_row: int) -> int:
        if not children[node]:
            rows[node] = float(next_row)
            return next_row + 1
        for child in children[node]:
            next_row = place(child, next_row)
        rows[node] = (rows[children[node][0]] + rows[children[node][-1]]) / 2
        return next_row

    place(-1, 0)
    return rows, depth


# ------------------------------------------------------------------ the draft/verify timeline


@dataclass(frozen=True)
class Forward:
    """One forward pass: the model that ran it (`lane`: "target", "draft", "head"), the tokens it fed per row,
    and its cost in units of a 1-token target forward."""

    lane: str
    tokens: int
    cost: float


@dataclass(frozen=True)
class TimedStep:
    """The forwards of one step, in the order they ran, and what the step's verification did: `drafted` guesses
    verified, `accepted` of them kept, `tokens` committed."""

    forwards: list[Forward]
    drafted: int
    accepted: int
    tokens: int


def measured_costs(
    target: CausalLM | PreTrainedModel,
    draft: CausalLM | PreTrainedModel | None = None,
    head_cost: float | None = None,
) -> dict[str, Callable[[int], float]]:
    """What a forward over n tokens costs, per lane, in units of a 1-token target forward, from the costs that
    `mtdecode.costs` keeps on disk (measured once on this host, or the reference costs in use):

    - "target": the target's cost curve, `curves.relative_cost`;
    - "draft": the draft's own curve, over the target's 1-token cost;
    - "head": `head_cost` for every head forward (EAGLE's cost of one more depth, `measure_depth_cost`).
    """
    kept = timing.forward_costs(CausalLM.wrap(target))
    costs = {"target": lambda n: curves.relative_cost(kept, n)}
    if draft is not None:
        own = timing.forward_costs(CausalLM.wrap(draft))
        costs["draft"] = lambda n: curves.relative_cost(own, n) * own[1] / kept[1]
    if head_cost is not None:
        costs["head"] = lambda n: head_cost
    return costs


def record_forwards(
    model: CausalLM | PreTrainedModel,
    prompt: Sequence[int],
    strategy: DecodingStrategy,
    *,
    max_new_tokens: int,
    costs: Mapping[str, Callable[[int], float]] | None = None,
    **options,
) -> list[TimedStep]:
    """Run `strategy` on one prompt and record every forward pass of each step: its model, its tokens, its cost.

    The target is watched, and the strategy's `draft` (Speculative, MTAD) or EAGLE head if it has one. A forward
    counts when it runs on a KV cache, so a model's probe without one (`CausalLM.forward_features` makes one the
    first time) is left out. The costs come from what is kept on disk (`measured_costs`), read before the run,
    so that nothing measured during the run is counted as one of its forwards.

    **Arguments:**

    - `model`, `prompt`, `max_new_tokens`, `options`: as for `mtdecode.generate` (one prompt).
    - `strategy`: any strategy; e.g. `Autoregressive()`, `Speculative(draft)`, `Eagle()`.
    - `costs`: per lane ("target", "draft", "head"), the cost of a forward over n tokens in units of a 1-token
      target forward; None: `measured_costs` (for EAGLE, its policy's `depth_cost` or the measured one).

    **Returns:**

    One `TimedStep` per step, in order.
    """
    target = CausalLM.wrap(model)
    watched = {"target": target.hf}
    draft = getattr(strategy, "draft", None)
    if draft is not None:
        watched["draft"] = CausalLM.wrap(draft).hf
    head_cost = None
    if isinstance(strategy, Eagle):
        head = strategy.head if strategy.head is not None else shipped_head(target)
        watched["head"] = head.layer  # the head's one decoder layer runs once per head forward
        if costs is None:
            head_cost = getattr(strategy.policy, "depth_cost", None)  # a fixed tree's policy prices no depth
            head_cost = probes.measure_depth_cost(target, head, strategy.width) if head_cost is None else head_cost
    costs = costs if costs is not None else measured_costs(target, draft, head_cost)
    missing = set(watched) - set(costs)
    if missing:
        raise ValueError(f"no cost given for the lanes {sorted(missing)}: `costs` must have one per model watched")
    seen: list[Forward] = []
    records: list[TimedStep] = []

    def close(step) -> None:
        records.append(TimedStep(list(seen), step.drafted, step.accepted, len(step.tokens)))
        seen.clear()

    with contextlib.ExitStack() as hooks:
        for lane, module in watched.items():
            hooks.enter_context(counting(module, lane, costs[lane], seen))
        generate(target, [list(prompt)], strategy, max_new_tokens=max_new_tokens, on_step=close, **options)
    return records


def timeline(
    runs: Mapping[str, Sequence[TimedStep]],
    *,
    unit: str = "cost, in 1-token target forwards",
    title: str | None = None,
) -> Figure:
    """Draw each run's forward passes one after another on a time axis, one lane per model.

    Time is in units of forward cost, not seconds measured now: each block is as wide as its forward's cost. A
    target forward that verified guesses is labelled accepted/drafted (where its block is wide enough for the
    text); the first forward of each lane (the prefill, the prompt read at once) is hatched. The right end of
    each run says how many tokens it made, and a dotted line marks where the first run ends.

    **Arguments:**

    - `runs`: for each run's name, its steps (`record_forwards`), e.g. {"greedy": ..., "speculative": ...}.
    - `unit`: the time axis' label.
    - `title`: a title (default: none).

    **Returns:**

    The matplotlib `Figure`. Each block carries the gid "<run>/<lane>", each accepted/drafted label "verdict".

    **Raises:**

    `ValueError` if a run is empty or a forward has a negative cost.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Rectangle

    for name, steps in runs.items():
        if not steps:
            raise ValueError(f"run {name!r} has no steps")
        for step in steps:
            if any(f.cost < 0 for f in step.forwards):
                raise ValueError(f"run {name!r} has a forward of negative cost")
    lanes = [(name, lane) for name, steps in runs.items() for lane in lanes_of(steps)]
    totals = {name: sum(f.cost for step in steps for f in step.forwards) for name, steps in runs.items()}
    longest = max(totals.values())
    fig, ax = plt.subplots(figsize=(min(13.0, max(8.0, 0.42 * longest + 3.5)), 0.6 * len(lanes) + 1.6))
    y = {key: i for i, key in enumerate(lanes)}
    verdicts = []  # (x, y, width, text) of each verification's label, placed once the scale is known
    for name, steps in runs.items():
        clock, started = 0.0, set()
        for step in steps:
            targets = [f for f in step.forwards if f.lane == "target"]
            for forward in step.forwards:
                fill, border = LANES.get(forward.lane, ("#bbbbbb", "#666666"))
                first = forward.lane not in started
                started.add(forward.lane)
                ax.add_patch(Rectangle((clock, y[name, forward.lane] - 0.33), forward.cost, 0.66, facecolor=fill,
                                       edgecolor=border, linewidth=0.6, hatch="//" if first else None,
                                       gid=f"{name}/{forward.lane}"))  # fmt: skip
                if step.drafted and targets and forward is targets[-1]:
                    verdicts.append((clock, y[name, "target"], forward.cost, f"{step.accepted}/{step.drafted}"))
                clock += forward.cost
        made = sum(step.tokens for step in steps)
        ax.text(clock + 0.15, y[name, "target"], f"{made} tokens at {clock:.1f}", va="center", fontsize=FONT + 1)
    first = next(iter(runs))  # the first run's end, across every lane: the one to beat
    ax.axvline(totals[first], color=plt.rcParams["axes.edgecolor"], linestyle=":", linewidth=1.2, zorder=0.5)
    for i in range(1, len(lanes)):  # a line between runs
        if lanes[i][0] != lanes[i - 1][0]:
            ax.axhline(i - 0.5, color="#999999", linewidth=0.8)
    ax.set_yticks(range(len(lanes)), [f"{name}: {lane}" for name, lane in lanes])
    ax.set_ylim(len(lanes) - 0.5, -0.5)
    ax.set_xlim(0, longest * 1.02 + 3.6)
    ax.set_xlabel(f"time ({unit})\naccepted/drafted on each verification; the prefill hatched", fontsize=FONT + 1)
    ax.tick_params(labelsize=FONT + 1)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    if title:
        ax.set_title(title, fontsize=FONT + 1)
    fig.tight_layout()
    label_verdicts(ax, verdicts)
    return fig


def label_verdicts(ax: Axes, verdicts: list[tuple[float, int, float, str]]) -> None:
    """Write accepted/drafted in each verification's block: across it where it fits, else up it where the block is
    at least a line wide, else not at all (a block narrower than a line of text)."""
    left, right = ax.get_xlim()
    inches = ax.get_position().width * ax.figure.get_figwidth() / (right - left)  # inches per unit of time
    line = FONT / 72  # a line of text, in inches
    for x, y, width, text in verdicts:
        across = 0.62 * line * len(text) <= 0.92 * width * inches
        if across or 1.2 * line <= width * inches:
            ax.text(x + width / 2, y, text, ha="center", va="center", fontsize=FONT, color=ON_FILL, gid="verdict",
                    rotation=0 if across else 90)  # fmt: skip


def lanes_of(steps: Sequence[TimedStep]) -> list[str]:
    """The lanes of a run in the order they first ran, the target's last (drafting comes before verifying)."""
    order = list(dict.fromkeys(f.lane for step in steps for f in step.forwards))
    return [lane for lane in order if lane != "target"] + (["target"] if "target" in order else [])


# ------------------------------------------------------------------ drawing and recording helpers


def cell(
    ax: Axes, x: int | float, y: int | float, token: str, face: str, edge: str, gid: str, style: str = "-"
) -> None:
    """A square cell at (x, y) with `token` in it (its label carries `gid`)."""
    from matplotlib.patches import FancyBboxPatch

    ax.add_patch(FancyBboxPatch((x - 0.42, y - 0.34), 0.84, 0.68, boxstyle="round,pad=0.02", facecolor=face,
                                edgecolor=edge, linewidth=2, linestyle=style))  # fmt: skip
    ax.text(x, y, shown(token), ha="center", va="center", fontsize=FONT, color=ON_FILL, gid=gid)


def arrow(ax: Axes, start: tuple[int, int], end: tuple[int, int], colour: str, gid: str) -> None:
    """An arrow from the cell at `start` to the cell at `end` (data coordinates; `xyann` and `xy` of the
    annotation), stopping short of both labels."""
    ax.annotate("", xy=end, xytext=start, gid=gid,
                arrowprops=dict(arrowstyle="-|>", color=colour, linewidth=1.6, shrinkA=13, shrinkB=13))  # fmt: skip


def label(
    ax: Axes, x: int | float, y: int | float, token: str, face: str, edge: str, gid: str, style: str = "-"
) -> Text:
    """A node: `token` in a rounded box at (x, y). Returns the text, which the edges attach to."""
    box = dict(boxstyle="round,pad=0.35", facecolor=face, edgecolor=edge, linewidth=1.8, linestyle=style)
    return ax.text(x, y, shown(token), ha="center", va="center", fontsize=FONT, color=ON_FILL, gid=gid, bbox=box)


def link(ax: Axes, parent: Text, child: Text, colour: str, gid: str) -> None:
    """An edge from the parent's box to the child's (the annotation's `xyann` and `xy` are their centres)."""
    ax.annotate("", xy=child.get_position(), xytext=parent.get_position(), gid=gid,
                arrowprops=dict(arrowstyle="-|>", color=colour, linewidth=1.8 if gid == "accepted-edge" else 1.1,
                                patchA=parent.get_bbox_patch(), patchB=child.get_bbox_patch(),
                                shrinkA=2, shrinkB=2))  # fmt: skip


@contextlib.contextmanager
def replaced(module: ModuleType, name: str, replacement: Callable) -> Iterator[None]:
    """`module.name` is `replacement` while the block runs, and what it was afterwards."""
    real = getattr(module, name)
    setattr(module, name, replacement)
    try:
        yield
    finally:
        setattr(module, name, real)


@contextlib.contextmanager
def counting(module, lane: str, cost: Callable[[int], float], seen: list[Forward]) -> Iterator[None]:
    """Append a `Forward` to `seen` for every call of `module` on a KV cache while the block runs."""

    def hook(called, args, kwargs) -> None:
        if called is not module or all(kwargs.get(k) is None for k in ("past_key_values", "cache")):
            return  # a copy of the module, or a call without a cache (a probe, not a step's forward)
        fed = next(x for x in (kwargs.get("input_ids"), kwargs.get("hidden_states"), *args) if x is not None)
        seen.append(Forward(lane, int(fed.shape[1]), float(cost(int(fed.shape[1])))))

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


__all__ = [
    "Forward",
    "LookaheadStep",
    "TimedStep",
    "TreeStep",
    "lookahead_window",
    "measured_costs",
    "record_eagle_trees",
    "record_forwards",
    "record_lookahead",
    "shown",
    "timeline",
    "token_text",
    "token_tree",
]
