"""KV-cache manager: after any sequence of appends, crops and compactions, the next forward's
logits equal those of a fresh forward over the committed tokens (float64)."""

import functools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mtdecode import CausalLM, KVCache, Runner, masks
from mtdecode.testing import tiny_model
from mtdecode.testing.tolerance import rounding_tolerance

VOCAB = 64


@functools.cache
def model(family: str) -> CausalLM:
    return CausalLM(tiny_model(family, vocab_size=VOCAB, seed=1))


tokens = st.lists(st.integers(0, VOCAB - 1), min_size=1, max_size=6)


@st.composite
def operations(draw):
    """A list of cache operations; each appends new entries, then resolves them."""
    ops = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["commit", "crop", "tree"]))
        if kind == "tree":
            n = draw(st.integers(1, 7))
            parents = [draw(st.integers(-1, i - 1)) for i in range(n)]
            leaf = draw(st.integers(0, n - 1))
            ops.append(("tree", draw(st.lists(st.integers(0, VOCAB - 1), min_size=n, max_size=n)), parents, leaf))
        else:
            ops.append((kind, draw(tokens), draw(st.floats(0, 1))))
    return ops


def path_to(leaf: int, parents: list[int]) -> list[int]:
    """Node indices from the root down to `leaf`."""
    path = []
    while leaf != -1:
        path.append(leaf)
        leaf = parents[leaf]
    return path[::-1]


def apply(runner: Runner, committed: list[int], op) -> list[int]:
    """Apply one operation to the runner's cache; return the committed tokens afterwards."""
    cache = runner.cache
    if op[0] == "tree":
        _, new, parents, leaf = op
        start = cache.length
        device = runner.model.device
        runner.forward(
            torch.tensor(new, device=device),
            masks.tree_positions(parents, start, device=device),
            masks.tree(parents, start, device=device),
        )
        path = path_to(leaf, parents)
        cache.keep(path)  # compaction: only the chosen root-to-leaf path survives, in order
        return committed + [new[i] for i in path]
    kind, new, fraction = op
    runner.extend(new)
    if kind == "commit":
        cache.commit()
        return committed + new
    length = round(fraction * cache.length)  # may roll back into earlier committed entries
    cache.crop(length)
    return (committed + new)[:length]


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@given(ops=operations(), probe=st.integers(0, VOCAB - 1))
def test_next_forward_equals_fresh_forward(family, ops, probe):
    runner = Runner(model(family), "target")
    committed: list[int] = []
    for op in ops:
        committed = apply(runner, committed, op)
        assert runner.cache.length == runner.cache.committed == len(committed)
        assert runner.cache.pending == 0
    got = runner.extend([probe])[-1]
    fresh = Runner(model(family), "fresh").extend(committed + [probe])[-1]
    tolerance = rounding_tolerance(model(family), fresh, keys=len(committed) + 1)
    torch.testing.assert_close(got, fresh, rtol=0, atol=tolerance)


def test_compaction_keeps_the_listed_entries_in_order():
    runner = Runner(model("llama"), "target")
    runner.extend([1, 2, 3])
    runner.cache.commit()
    runner.extend([4, 5, 6, 7])
    before = runner.cache.hf_cache.layers[0].keys.clone()
    runner.cache.keep([3, 1])
    after = runner.cache.hf_cache.layers[0].keys
    assert torch.equal(after[..., :3, :], before[..., :3, :])
    assert torch.equal(after[..., 3, :], before[..., 6, :])
    assert torch.equal(after[..., 4, :], before[..., 4, :])
    assert (runner.cache.committed, runner.cache.length) == (5, 5)


def test_compaction_of_the_wrong_path_is_detectable():
    """Control: keeping entries that are not a path (a sibling's) breaks the equality the property checks."""
    runner = Runner(model("llama"), "target")
    runner.extend([1, 2])
    runner.cache.commit()
    parents = [-1, -1]  # two alternative next tokens
    runner.forward(torch.tensor([3, 4]), masks.tree_positions(parents, 2), masks.tree(parents, 2))
    runner.cache.keep([0, 1])  # 4 was computed without seeing 3: not a valid sequence
    got = runner.extend([5])[-1]
    fresh = Runner(model("llama"), "fresh").extend([1, 2, 3, 4, 5])[-1]
    assert (got - fresh).abs().max() > 100 * rounding_tolerance(model("llama"), fresh, keys=5)


@pytest.mark.parametrize("bad", [[-1], [3], [0, 0]])
def test_keep_rejects_bad_indices(bad):
    cache_runner = Runner(model("llama"), "target")
    cache_runner.extend([1, 2, 3])
    with pytest.raises(ValueError, match="keep"):
        cache_runner.cache.keep(bad)


def test_crop_rejects_bad_lengths():
    cache = KVCache()
    with pytest.raises(ValueError, match="crop"):
        cache.crop(1)
