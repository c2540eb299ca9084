"""The masks each strategy builds, with a label for every row and column: what `mtdecode masks` draws.

Each function returns a `LabelledMask`; `.plot(path)` renders it. Rows are the new tokens
fed in one forward pass, columns are the keys (the committed prefix in the cache, then the
new tokens). A label reads `index:name @position` where the position id differs from the
column order.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from mtdecode.masks.batch import place
from mtdecode.masks.build import causal, tree, tree_positions
from mtdecode.masks.lookahead import LookaheadLayout
from mtdecode.masks.plot import plot
from mtdecode.tensor_types import Bool, Tensor


@dataclass(frozen=True)
class LabelledMask:
    """A mask with a label per query row and per key column."""

    mask: Bool[Tensor, "query key"]
    query_labels: list[str]
    key_labels: list[str]
    prefix: int
    title: str

    def plot(self, path: str | Path | None = None, ax=None):
        """Draw it with `mtdecode.masks.plot` (into `ax` if given); saved to `path` if given. Returns the figure."""
        return plot(
            self.mask,
            query_labels=self.query_labels,
            key_labels=self.key_labels,
            prefix=self.prefix,
            title=self.title,
            path=path,
            ax=ax,
        )


def prefix_names(length: int) -> list[str]:
    """Generic names for committed tokens: p0, p1, ..."""
    return [f"p{i}" for i in range(length)]


def chain(new: Sequence[str], prefix: Sequence[str], title: str) -> LabelledMask:
    """A causal mask: every new token sees the prefix and the new tokens before it."""
    mask = causal(len(new), prefix=len(prefix))
    labels = [f"{i}:{name}" for i, name in enumerate(new)]
    return LabelledMask(mask, labels, list(prefix) + labels, len(prefix), title)


def causal_mask(length: int, prefix: Sequence[str]) -> LabelledMask:
    """Plain left-to-right decoding of `length` new tokens (prefill, or autoregressive with length 1)."""
    names = [f"t{i}" for i in range(length)]
    return chain(names, prefix, f"causal: {len(prefix)} cached + {length} new tokens")


def speculative_mask(draft_tokens: int, prefix: Sequence[str]) -> LabelledMask:
    """Speculative decoding's verification pass: x0 (the newest committed token) and k draft guesses, causal."""
    names = ["x0"] + [f"d{i}" for i in range(1, draft_tokens + 1)]
    return chain(names, prefix, f"speculative: x0 and {draft_tokens} draft tokens, verified in one pass")


def tree_mask(parents: Sequence[int], prefix: Sequence[str], names: Sequence[str] | None = None) -> LabelledMask:
    """A token tree (MTAD's beams in the draft, or branches): each node sees the prefix and its ancestors.

    `parents[i]` is node i's parent among the new tokens, or -1 for the prefix; `names` label the nodes.
    """
    mask = tree(parents, prefix=len(prefix))
    positions = tree_positions(parents, prefix=len(prefix)).tolist()
    names = [f"{i}:{name}" for i, name in enumerate(names or [f"n{i}" for i in range(len(parents))])]
    queries = [f"{name} @{pos}" for name, pos in zip(names, positions, strict=True)]
    parent_text = ",".join(map(str, parents))
    return LabelledMask(mask, queries, list(prefix) + names, len(prefix), f"tree, parents [{parent_text}]")


def lookahead_mask(window: int, ngram: int, guesses: int, prefix: Sequence[str]) -> LabelledMask:
    """Lookahead decoding's one forward pass (Fu et al., Figure 2b): a W x (N-1) Jacobi window
    (cells w{row}{column}) and G candidate n-grams of N-1 tokens (c{candidate}{token})."""
    if ngram < 2:
        raise ValueError(f"ngram must be >= 2 (a window needs at least one row), got {ngram}")
    layout = LookaheadLayout(
        context=1, rows=ngram - 1, columns=window, candidates=guesses, length=ngram - 1 if guesses else 0
    )
    names = ["x0"] * layout.size
    for r in range(layout.rows):
        for j in range(layout.columns):
            if (r, j) != (0, 0):
                names[layout.cell(r, j)] = f"w{r}{j}"
    for c in range(layout.candidates):
        for k in range(layout.length):
            names[layout.candidate(c, k)] = f"c{c}{k}"
    positions = layout.positions(len(prefix)).tolist()
    title = f"lookahead: W={window}, N={ngram}, G={guesses} (window w, candidates c)"
    return LabelledMask(
        layout.mask(len(prefix)),
        [f"{name} @{pos}" for name, pos in zip(names, positions, strict=True)],
        list(prefix) + names,
        len(prefix),
        title,
    )


#: an example batch: what each row holds in each cache column ("" is a hole)
BATCH_EXAMPLE = (
    ("p0", "p1", "p2", "p3", "p4"),  # a row that holds 5 tokens
    ("p0", "p1", "p2", "", ""),  # a shorter prompt: holes where the others hold tokens
    ("p0", "", "p1", "p2", "p3"),  # a hole in the middle: an earlier step's rejected guess
)


def batch_mask(draft_tokens: int, rows: Sequence[Sequence[str]] = BATCH_EXAMPLE) -> list[LabelledMask]:
    """Speculative verification (x0 and k draft tokens) over a batch whose rows hold different numbers of
    cached tokens, as `mtdecode.masks.place` builds it: one mask per row, over the same cache columns."""
    widths = {len(row) for row in rows}
    if len(widths) != 1:
        raise ValueError(f"every row must list the same number of cache columns, got {sorted(widths)}")
    valid = torch.tensor([[name != "" for name in row] for row in rows])  # (batch, columns)
    new = ["x0"] + [f"d{i}" for i in range(1, draft_tokens + 1)]
    real = torch.ones(len(rows), len(new), dtype=torch.bool)
    full = place(causal(len(new))[None], valid, valid.shape[1], real)  # (batch, new, columns + new)
    figures = []
    for b, row in enumerate(rows):
        held = int(valid[b].sum())
        cached = [name or "hole" for name in row]  # p<i> is the row's token at position i
        queries = [f"{i}:{name} @{held + i}" for i, name in enumerate(new)]
        title = f"row {b}: holds {held} tokens, so x0 is at position {held}"
        keys = cached + [f"{i}:{name}" for i, name in enumerate(new)]
        figures.append(LabelledMask(full[b], queries, keys, len(row), title))
    return figures


def plot_batch(figures: Sequence[LabelledMask], path: str | Path | None = None):
    """Draw one panel per row, stacked; saved to `path` if given. Returns the figure."""
    import matplotlib.pyplot as plt

    columns = figures[0].mask.shape[1]
    rows = sum(f.mask.shape[0] for f in figures)
    fig, axes = plt.subplots(len(figures), 1, figsize=(max(4.0, 0.4 * columns + 2), 0.45 * rows + 1.6 * len(figures)))
    for ax, figure in zip([axes] if len(figures) == 1 else axes, figures, strict=True):
        figure.plot(ax=ax)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig
