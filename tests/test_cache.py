"""KV-cache manager: after any sequence of appends, crops and compactions, in every row of a batch,
the next forward's logits equal those of a fresh forward over that row's committed tokens alone
(float64); holes are packed away, so a long batched run keeps its cache small."""

import copy
import functools

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mtdecode import CausalLM, KVCache, Runner, masks
from mtdecode.testing import tiny_model
from mtdecode.testing.tolerance import rounding_tolerance
from mtdecode.zoo.eagle import committed_features

VOCAB = 64


@functools.cache
def model(family: str) -> CausalLM:
    return CausalLM(tiny_model(family, vocab_size=VOCAB, seed=1))


tokens = st.lists(st.integers(0, VOCAB - 1), min_size=0, max_size=6)


@st.composite
def operations(draw, batch: int):
    """A list of cache operations on a batch; each appends new entries to every row, then resolves them.

    - ("commit", rows): each row feeds its own tokens (any number, 0 included), all are kept;
    - ("crop", rows, fractions): the same, then each row keeps a fraction of what it holds (may roll back);
    - ("tree", rows, parents, leaves): each row feeds a forest of its own shape and keeps one root-to-leaf path.
    """
    ops = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["commit", "crop", "tree"]))
        if kind == "tree":
            n = draw(st.integers(1, 7))
            parents = [[draw(st.integers(-1, i - 1)) for i in range(n)] for _ in range(batch)]
            leaves = [draw(st.integers(0, n - 1)) for _ in range(batch)]
            rows = [draw(st.lists(st.integers(0, VOCAB - 1), min_size=n, max_size=n)) for _ in range(batch)]
            ops.append(("tree", rows, parents, leaves))
        else:
            rows = [draw(tokens) for _ in range(batch)]
            if not any(rows):
                rows[0] = [draw(st.integers(0, VOCAB - 1))]  # a forward needs at least one token somewhere
            ops.append((kind, rows, [draw(st.floats(0, 1)) for _ in range(batch)]))
    return ops


def path_to(leaf: int, parents: list[int]) -> list[int]:
    """Node indices from the root down to `leaf`."""
    path = []
    while leaf != -1:
        path.append(leaf)
        leaf = parents[leaf]
    return path[::-1]


def apply(runner: Runner, committed: list[list[int]], op) -> list[list[int]]:
    """Apply one operation to the runner's cache; return each row's committed tokens afterwards."""
    cache = runner.cache
    if op[0] == "tree":
        _, rows, parents, leaves = op
        parents_t = torch.tensor(parents)
        runner.forward(torch.tensor(rows), masks.tree_positions(parents_t), masks.tree(parents_t))
        paths = [path_to(leaf, p) for leaf, p in zip(leaves, parents, strict=True)]
        width = max(map(len, paths))
        cache.keep([path + [-1] * (width - len(path)) for path in paths])  # each row keeps its own path
        return [c + [row[i] for i in path] for c, row, path in zip(committed, rows, paths, strict=True)]
    kind, rows, fractions = op
    runner.extend(rows)
    fed = [c + row for c, row in zip(committed, rows, strict=True)]
    if kind == "commit":
        cache.commit()
        return fed
    lengths = [round(f * len(row)) for f, row in zip(fractions, fed, strict=True)]  # may roll back committed entries
    cache.crop(lengths)
    return [row[:n] for row, n in zip(fed, lengths, strict=True)]


@pytest.mark.parametrize("family", ["llama", "qwen2"])
@pytest.mark.parametrize("batch", [1, 3])
@given(data=st.data(), probe=st.integers(0, VOCAB - 1))
def test_next_forward_equals_fresh_forward(family, batch, data, probe):
    runner = Runner(model(family), "target")
    committed: list[list[int]] = [[] for _ in range(batch)]
    for op in data.draw(operations(batch)):
        committed = apply(runner, committed, op)
        assert runner.cache.lengths.tolist() == [len(c) for c in committed]
        assert runner.cache.pending == 0
    got = runner.extend([[probe]] * batch)[:, -1]  # (batch, vocab)
    for b, row in enumerate(committed):
        fresh = Runner(model(family), "fresh").extend(row + [probe])[0, -1]
        tolerance = rounding_tolerance(model(family), fresh, keys=len(row) + 1)
        torch.testing.assert_close(got[b], fresh, rtol=0, atol=tolerance)


@pytest.mark.parametrize("batch", [1, 3])
@given(data=st.data())
def test_carried_features_follow_their_entries(batch, data):
    """A cache that carries features keeps, packs and drops them with the keys and values: after any operations,
    each row's committed features are those of a fresh forward over its committed tokens alone."""
    runner = Runner(model("llama"), "target")
    runner.cache.carry_features()
    committed: list[list[int]] = [[] for _ in range(batch)]
    for op in data.draw(operations(batch)):
        committed = apply(runner, committed, op)
    start = torch.tensor([data.draw(st.integers(0, len(row))) for row in committed])
    carried = committed_features(runner.cache, start)
    for b, row in enumerate(committed):
        assert carried[b].shape[0] == len(row) - start[b]
        if row:
            _, fresh = Runner(model("llama"), "fresh").extend_features([row])
            tolerance = rounding_tolerance(model("llama"), fresh, keys=len(row))
            torch.testing.assert_close(carried[b], fresh[0, int(start[b]) :], rtol=0, atol=tolerance)


def test_features_are_carried_only_when_asked_for_before_the_first_forward():
    runner = Runner(model("llama"), "target")
    runner.extend([1, 2, 3])
    runner.cache.commit()
    assert runner.cache.features is None
    with pytest.raises(ValueError, match="carries no features"):
        committed_features(runner.cache, torch.tensor([0]))
    with pytest.raises(ValueError, match="must come before the first forward"):
        runner.cache.carry_features()


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
    assert (runner.cache.committed, runner.cache.columns) == (5, 5)


def test_compaction_of_the_wrong_path_is_detectable():
    """Control: keeping entries that are not a path (a sibling's) breaks the equality the property checks."""
    runner = Runner(model("llama"), "target")
    runner.extend([1, 2])
    runner.cache.commit()
    parents = [-1, -1]  # two alternative next tokens
    runner.forward(torch.tensor([[3, 4]]), masks.tree_positions(parents), masks.tree(parents))
    runner.cache.keep([0, 1])  # 4 was computed without seeing 3: not a valid sequence
    got = runner.extend([5])[0, -1]
    fresh = Runner(model("llama"), "fresh").extend([1, 2, 3, 4, 5])[0, -1]
    assert (got - fresh).abs().max() > 100 * rounding_tolerance(model("llama"), fresh, keys=5)


def test_a_long_ragged_run_keeps_the_cache_small():
    """Rows that keep different numbers of guesses leave holes; packing keeps the columns within about
    twice the longest row, whatever the number of steps, and the rows stay exact."""
    runner = Runner(model("llama"), "target")
    generator = torch.Generator().manual_seed(0)
    committed = [[1], [2, 3], [4, 5, 6]]
    runner.extend(committed)
    runner.cache.commit()
    for _ in range(60):
        guesses = torch.randint(VOCAB, (3, 5), generator=generator).tolist()
        runner.extend(guesses)
        kept = torch.randint(0, 6, (3,), generator=generator).tolist()  # each row accepts its own number
        committed = [c + g[:k] for c, g, k in zip(committed, guesses, kept, strict=True)]
        runner.cache.crop([len(c) for c in committed])
        assert runner.cache.columns <= 2 * max(map(len, committed)) + 16
    got = runner.extend([[7]] * 3)[:, -1]
    for b, row in enumerate(committed):
        fresh = Runner(model("llama"), "fresh").extend(row + [7])[0, -1]
        torch.testing.assert_close(got[b], fresh, rtol=0, atol=rounding_tolerance(model("llama"), fresh, keys=len(row)))


def test_a_chains_ragged_prefixes_are_cut_not_packed(monkeypatch):
    """Rows that keep different numbers of their guesses from the front (a chain's accepted prefixes) keep them
    where they are: the cache moves no entry and holds what packing would have left in every valid column."""
    runner = Runner(model("llama"), "target")
    runner.extend([[1], [2, 3], [4, 5, 6]])
    runner.cache.commit()
    runner.extend([[9, 8, 7, 6], [5, 4, 3, 2], [1, 2, 3, 4]])
    lengths = torch.tensor([1 + 0, 2 + 2, 3 + 1])  # each row's committed tokens and the guesses it accepts
    packed = copy.deepcopy(runner.cache)  # the general way: every row's survivors gathered to the front
    packed.valid = packed.valid & (packed.positions < lengths[:, None])
    packed._resolve(packed._survivors(packed.valid[:, packed.committed :]))

    def moved(*_):
        raise AssertionError("a chain's accepted prefixes were packed")

    monkeypatch.setattr(KVCache, "_pack", moved)
    runner.cache.crop(lengths)
    cut = runner.cache
    assert (cut.committed, cut.columns) == (packed.committed, packed.columns) == (5, 5)  # the 4th guess column goes
    assert torch.equal(cut.valid, packed.valid)
    valid = cut.valid  # what a hole holds is never read
    assert torch.equal(cut.positions[valid], packed.positions[valid])
    for ours, theirs in zip(cut.hf_cache.layers, packed.hf_cache.layers, strict=True):
        for mine, other in ((ours.keys, theirs.keys), (ours.values, theirs.values)):
            assert torch.equal(mine.transpose(1, 2)[valid], other.transpose(1, 2)[valid])  # (entries, heads, dim)


def test_a_batch_of_one_never_has_holes():
    runner = Runner(model("llama"), "target")
    runner.extend([1, 2, 3])
    runner.cache.commit()
    for kept in (0, 2, 1, 4):
        runner.extend([9, 8, 7, 6])
        runner.cache.crop(int(runner.cache.lengths[0]) + kept)
        assert bool(runner.cache.valid.all()) and runner.cache.columns == int(runner.cache.lengths[0])


@pytest.mark.parametrize("bad", [[-2], [3], [0, 0]])
def test_keep_rejects_bad_indices(bad):
    cache_runner = Runner(model("llama"), "target")
    cache_runner.extend([1, 2, 3])
    with pytest.raises(ValueError, match="keep"):
        cache_runner.cache.keep(bad)


def test_crop_rejects_bad_lengths():
    cache = KVCache()
    with pytest.raises(ValueError, match="crop"):
        cache.crop(1)
    runner = Runner(model("llama"), "target")
    runner.extend([[1, 2], [3, 4, 5]])
    with pytest.raises(ValueError, match="crop"):
        runner.cache.crop([3, 3])  # row 0 holds only 2
