"""The token-wise layers skip the cells of a forward that nobody reads (`mtdecode.tokenwise`).

- A read cell's logits are those of the forward that computes every cell, up to the rounding of a product over
  another number of rows (float64: within 1e-12); the unread rows' logits are zeros, so the skip happened.
- The rule skips only where it pays: at least `FEWEST_SKIPPED` unread cells and `FEWEST_READ` read ones.
- A switched model keeps the costs measured for it unswitched (they are keyed by its layers).
- In a batch whose rows finish at different steps, the finished rows' slots are skipped in the later forwards and
  every row still equals its prompt decoded alone (the row-parity tests of `tests/test_batch.py` run every strategy
  on switched models too).
"""

import pytest
import torch

from mtdecode import Runner, generate, tokenwise
from mtdecode.model import CausalLM
from mtdecode.strategies import PromptLookup
from mtdecode.testing import greedy_tokens, tiny_model
from mtdecode.tokenwise import skipping, tokenwise_skips

PROMPTS = [[1, 2, 3, 4, 5, 6], [7, 8], [9, 10, 11, 12, 13], [14, 15, 16]]


def switched(dtype=torch.float64):
    return tokenwise_skips(tiny_model("llama", vocab_size=32, seed=4, dtype=dtype))


def forward_twice(model, rows_read):
    """The prompts' forward (left padded), then 3 new tokens per row, each with the given rows read."""
    runner = Runner(CausalLM(model), "test", batch=len(PROMPTS))
    runner.rows_read = rows_read
    first = runner.extend(PROMPTS)
    runner.cache.commit()
    second = runner.extend(torch.tensor([[3, 4, 5]] * len(PROMPTS)))
    return first, second


def test_read_cells_are_the_full_forwards_and_unread_rows_are_skipped(monkeypatch):
    model = switched()
    computed = []  # the cells each skipping MLP computed
    original = tokenwise._on_read_cells
    monkeypatch.setattr(
        tokenwise, "_on_read_cells", lambda f, x, index, d: computed.append(len(index)) or original(f, x, index, d)
    )
    read = torch.tensor([True, False, True, False])
    skipped = forward_twice(model, read)
    assert computed, "no layer skipped a cell"
    monkeypatch.setattr(tokenwise, "FEWEST_SKIPPED", 10**9)  # computes every cell
    full = forward_twice(model, read)
    # the prompts' forward reads the read rows' real tokens (not their left padding), the next their 3 tokens each
    real = torch.tensor([[i >= 6 - len(p) for i in range(6)] for p in PROMPTS])
    cells = [real & read[:, None], read[:, None].expand(-1, 3)]
    assert set(computed) == {int(c.sum()) for c in cells}
    for ours, reference, kept in zip(skipped, full, cells, strict=True):
        assert (ours[kept] - reference[kept]).abs().max() <= 1e-12
    assert skipped[1][~read].eq(0).all() and not full[1][~read].eq(0).all()


@pytest.mark.parametrize(
    ("read", "skips"),
    [
        ([True] * 8 + [False] * 4, True),  # 4 unread, 8 read
        ([True] * 8 + [False] * 3, False),  # 3 unread: not worth a gather
        ([True] * 3 + [False] * 9, False),  # 3 read: the slower kernels of a block of 1 to 3
        ([True] * 4 + [False] * 4, True),
    ],
)
def test_the_rule_skips_only_where_enough_cells_are_unread_and_read(read, skips):
    index = skipping(torch.tensor(read))
    assert (index is not None) == skips
    if skips:
        assert index.tolist() == [i for i, r in enumerate(read) if r]


def test_a_finished_rows_slot_is_skipped_and_every_row_still_equals_its_prompt_alone(monkeypatch):
    """Prompt lookup on text that repeats: rows accept their copies at different rates and finish at different
    steps; after the first row finishes, forwards skip its slot (their MLPs compute fewer cells than the
    rectangle), and every row equals greedy decoding of its prompt alone. Without the session marking its finished
    rows (`Runner.rows_read`), no forward after the prompts' would skip, and this fails."""
    model = switched()
    prompts = [[1, 2, 3, 1, 2, 3, 1, 2], [5, 6, 7, 8, 9, 10, 11, 12], [1, 2, 1, 2, 1, 2, 1, 2], [4, 4, 4, 4, 4, 4]]
    skips = []  # per skipping MLP call: (cells in the rectangle, cells computed)
    original = tokenwise._on_read_cells
    monkeypatch.setattr(
        tokenwise,
        "_on_read_cells",
        lambda f, x, index, d: skips.append((x.numel() // x.shape[-1], len(index))) or original(f, x, index, d),
    )
    result = generate(model, prompts, PromptLookup(3, 6), max_new_tokens=24, seed=0)
    for b, prompt in enumerate(prompts):
        assert result.row(b) == greedy_tokens(model, prompt, 24)
    finished_at = sorted(len(result.steps_of(b)) for b in range(len(prompts)))
    assert finished_at[0] < finished_at[-1], "the rows finished together: nothing to skip"
    after_prompts = [s for s in skips if s[0] != len(prompts) * max(map(len, prompts))]
    assert after_prompts and all(computed < cells for cells, computed in after_prompts)


def test_a_switched_model_keeps_its_measured_costs():
    """The costs kept on disk and the shipped reference costs are keyed by the model's layers (`store.module_key`):
    a switched layer counts as the layer it was switched from, since every cost measurement reads every cell."""
    from mtdecode import store

    plain = tiny_model("llama", vocab_size=32, seed=4)
    key = store.module_key(plain)
    tokenwise_skips(plain)
    assert type(plain.model.layers[0].mlp).__name__ == "SkipsTokensLlamaMLP"
    assert store.module_key(plain) == key
