"""Mask builders against brute-force definitions written straight from their rules."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mtdecode import masks


def brute_causal(num_new: int, prefix: int) -> torch.Tensor:
    """New token i may see key j iff j is a prefix token or a new token at or before i."""
    mask = torch.zeros(num_new, prefix + num_new, dtype=torch.bool)
    for i in range(num_new):
        for j in range(prefix + num_new):
            mask[i, j] = j < prefix or (j - prefix) <= i
    return mask


def brute_tree(parents: list[int], prefix: int) -> torch.Tensor:
    """New token i may see key j iff j is a prefix token, i itself, or an ancestor of i."""
    n = len(parents)
    mask = torch.zeros(n, prefix + n, dtype=torch.bool)
    for i in range(n):
        mask[i, :prefix] = True
        node = i
        while node != -1:
            mask[i, prefix + node] = True
            node = parents[node]
    return mask


@st.composite
def forests(draw, max_nodes: int = 12):
    n = draw(st.integers(1, max_nodes))
    return [draw(st.integers(-1, i - 1)) for i in range(n)]


@given(num_new=st.integers(1, 12), prefix=st.integers(0, 12))
def test_causal_equals_brute_force(num_new, prefix):
    assert torch.equal(masks.causal(num_new, prefix), brute_causal(num_new, prefix))


@given(parents=forests(), prefix=st.integers(0, 8))
def test_tree_equals_brute_force(parents, prefix):
    assert torch.equal(masks.tree(parents, prefix), brute_tree(parents, prefix))


@given(parents=forests(), prefix=st.integers(0, 8))
def test_tree_positions_are_prefix_plus_depth(parents, prefix):
    positions = masks.tree_positions(parents, prefix)
    for i, parent in enumerate(parents):
        expected = prefix if parent == -1 else positions[parent] + 1
        assert positions[i] == expected


@given(num_new=st.integers(1, 12), prefix=st.integers(0, 8))
def test_a_chain_is_causal(num_new, prefix):
    parents = list(range(-1, num_new - 1))  # one straight chain: each token's parent is the one before
    assert torch.equal(masks.tree(parents, prefix), masks.causal(num_new, prefix))
    assert masks.tree_positions(parents, prefix).tolist() == list(range(prefix, prefix + num_new))


@pytest.mark.parametrize("parents", [[0], [-1, 1], [-1, 0, 3, 1], [-2]])
def test_tree_rejects_parents_that_do_not_come_first(parents):
    with pytest.raises(ValueError, match="parent"):
        masks.tree(parents, 3)


@pytest.mark.parametrize("num_new, prefix", [(0, 3), (2, -1)])
def test_bad_sizes(num_new, prefix):
    with pytest.raises(ValueError):
        masks.causal(num_new, prefix)


def test_plot_leaves_the_matplotlib_backend_alone(tmp_path):
    import matplotlib

    before = matplotlib.get_backend()
    masks.plot(masks.causal(2, 1), path=tmp_path / "causal.png")
    assert matplotlib.get_backend() == before


def test_plot_writes_a_picture(tmp_path):
    mask = masks.tree([-1, 0, -1, 2], prefix=2)
    path = tmp_path / "tree.png"
    fig = masks.plot(mask, prefix=2, key_labels=["p0", "p1", "a", "b", "c", "d"], title="two branches", path=path)
    assert path.stat().st_size > 1000
    assert len(fig.axes) == 1
    with pytest.raises(ValueError, match="rows"):
        masks.plot(mask, query_labels=["only one"])


def lookahead_roles(context: int, rows: int, columns: int, candidates: int, length: int) -> list[tuple]:
    """Each fed token's role, in feeding order: ('ctx', i), ('cell', r, j) without (0, 0), ('cand', c, k)."""
    roles: list[tuple] = [("ctx", i) for i in range(context)]
    roles += [("cell", 0, j) for j in range(1, columns)]
    roles += [("cell", r, j) for r in range(1, rows) for j in range(columns)]
    roles += [("cand", c, k) for c in range(candidates) for k in range(length)]
    return roles


def brute_lookahead(context, rows, columns, candidates, length, prefix):
    """Straight from the rule: all see the prefix; the context is causal; window and candidates see
    the context (x0 = cell (0, 0) is its last token); cell (r, j) sees row 0 up to column j and
    column j rows 1..r; candidate c token k sees its own tokens 0..k; nothing else."""
    roles = lookahead_roles(context, rows, columns, candidates, length)
    mask = torch.zeros(len(roles), prefix + len(roles), dtype=torch.bool)
    for qi, q in enumerate(roles):
        mask[qi, :prefix] = True
        for ki, key in enumerate(roles):
            if q[0] == "ctx":
                allowed = key[0] == "ctx" and key[1] <= q[1]
            elif key[0] == "ctx":
                allowed = True
            elif q[0] == "cell" and key[0] == "cell":
                (_, r, j), (_, kr, kj) = q, key
                allowed = (kr == 0 and 1 <= kj <= j) or (kj == j and 1 <= kr <= r)
            elif q[0] == "cand" and key[0] == "cand":
                allowed = key[1] == q[1] and key[2] <= q[2]
            else:
                allowed = False
            mask[qi, prefix + ki] = allowed
    return mask


def brute_lookahead_positions(context, rows, columns, candidates, length, prefix):
    """Context token i at prefix + i; with p = x0's position, cell (r, j) at p + r + j,
    candidate token k at p + 1 + k."""
    p = prefix + context - 1
    table = {"ctx": lambda i: prefix + i, "cell": lambda r, j: p + r + j, "cand": lambda c, k: p + 1 + k}
    return torch.tensor(
        [table[role[0]](*role[1:]) for role in lookahead_roles(context, rows, columns, candidates, length)]
    )


@given(
    context=st.integers(1, 4),
    rows=st.integers(1, 4),
    columns=st.integers(1, 5),
    candidates=st.integers(0, 4),
    length=st.integers(1, 4),
    prefix=st.integers(0, 5),
)
def test_lookahead_layout_equals_brute_force(context, rows, columns, candidates, length, prefix):
    length = length if candidates else 0
    layout = masks.LookaheadLayout(context, rows, columns, candidates, length)
    assert torch.equal(layout.mask(prefix), brute_lookahead(context, rows, columns, candidates, length, prefix))
    assert torch.equal(
        layout.positions(prefix), brute_lookahead_positions(context, rows, columns, candidates, length, prefix)
    )
    roles = lookahead_roles(context, rows, columns, candidates, length)
    assert layout.size == len(roles)
    for index, role in enumerate(roles):
        if role[0] == "cell":
            assert layout.cell(role[1], role[2]) == index
        elif role[0] == "cand":
            assert layout.candidate(role[1], role[2]) == index
    assert layout.cell(0, 0) == context - 1


@pytest.mark.parametrize("w, n, g", [(7, 5, 7), (15, 5, 15), (1, 2, 0), (3, 3, 2)])
def test_lookahead_layout_for_paper_settings(w, n, g):
    """The paper's (W, N, G) in steady state: one x0, N - 1 rows of W, G candidates of N - 1."""
    layout = masks.LookaheadLayout(1, n - 1, w, g, n - 1 if g else 0)
    assert layout.size == (w + g) * (n - 1)
    assert torch.equal(layout.mask(3), brute_lookahead(1, n - 1, w, g, n - 1 if g else 0, 3))


def test_lookahead_layout_rejects_bad_sizes():
    with pytest.raises(ValueError, match="context, rows and columns"):
        masks.LookaheadLayout(0, 1, 1)
    with pytest.raises(ValueError, match="both be 0"):
        masks.LookaheadLayout(1, 1, 1, candidates=2, length=0)
