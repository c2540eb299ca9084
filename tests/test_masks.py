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
    parents = masks.chain_parents(num_new)
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
