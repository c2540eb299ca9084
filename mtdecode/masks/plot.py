"""Render an attention mask as a picture (for the docs and the classroom)."""

from collections.abc import Sequence
from pathlib import Path

from mtdecode.tensor_types import Bool, Tensor


def plot(
    mask: Bool[Tensor, "query key"],
    *,
    query_labels: Sequence[str] | None = None,
    key_labels: Sequence[str] | None = None,
    prefix: int = 0,
    title: str | None = None,
    path: str | Path | None = None,
    ax=None,
):
    """Draw `mask` as a grid: filled cells are the keys a query may attend to.

    **Arguments:**

    - `mask`: a boolean mask, one row per query, one column per key.
    - `query_labels`, `key_labels`: text for each row and column (for example the tokens).
    - `prefix`: how many leading columns are the committed prefix; a line separates them.
    - `title`: a title above the picture.
    - `path`: if given, the figure is saved there (PNG, SVG, ... by extension).
    - `ax`: a matplotlib `Axes` to draw into; a new figure is made if omitted.

    **Returns:**

    The matplotlib `Figure`.
    """
    import matplotlib.pyplot as plt  # the current backend is left as it is (inline in notebooks)

    num_query, num_key = mask.shape
    if query_labels is not None and len(query_labels) != num_query:
        raise ValueError(f"query_labels has {len(query_labels)} entries, the mask has {num_query} rows")
    if key_labels is not None and len(key_labels) != num_key:
        raise ValueError(f"key_labels has {len(key_labels)} entries, the mask has {num_key} columns")

    if ax is None:
        size = (max(3.0, 0.35 * num_key + 1.5), max(2.5, 0.35 * num_query + 1.2))
        fig, ax = plt.subplots(figsize=size)
    else:
        fig = ax.figure
    ax.imshow(mask.detach().cpu().numpy(), cmap="Blues", vmin=0, vmax=1.4, aspect="equal")
    # thin white lines between cells so every cell can be counted
    ax.set_xticks([x - 0.5 for x in range(1, num_key)], minor=True)
    ax.set_yticks([y - 0.5 for y in range(1, num_query)], minor=True)
    ax.grid(which="minor", color="white", linewidth=1)
    ax.tick_params(which="minor", length=0)
    ax.set_xticks(range(num_key), key_labels if key_labels is not None else range(num_key))
    ax.set_yticks(range(num_query), query_labels if query_labels is not None else range(num_query))
    ax.tick_params(axis="x", labelrotation=90 if key_labels is not None else 0)
    if 0 < prefix < num_key:
        ax.axvline(prefix - 0.5, color="tab:red", linewidth=2)
    ax.set_xlabel("key (may be attended to)")
    ax.set_ylabel("query (new token)")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig
