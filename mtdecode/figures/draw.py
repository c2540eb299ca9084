"""What every teaching figure shares: its colours and sizes, token labels, cells, arrows and links."""

from collections.abc import Callable, Sequence

from matplotlib.axes import Axes
from matplotlib.text import Text

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
