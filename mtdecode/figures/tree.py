"""EAGLE's token tree, drawn from a real run (`record_steps`, `token_tree`)."""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from matplotlib.figure import Figure

from mtdecode.figures.draw import (
    ACCEPTED,
    COMMITTED,
    FONT,
    GUESS,
    PATH,
    TARGET_TOKEN,
    label,
    link,
)


@dataclass(frozen=True)
class TreeStep:
    """The token tree one EAGLE step verified, as token texts (`record_steps`).

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


def watch_trees(real: Callable, records: list[TreeStep], text: Callable[[int], str]) -> Callable:
    """`verify_tree` as it is (`real`), which also appends each step's tree of row 0 to `records` (`record_steps`)."""

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

    return watched


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
