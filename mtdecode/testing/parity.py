"""Greedy parity: a strategy at temperature 0 must produce exactly the tokens of plain
greedy decoding. These checks are the oracle for every exact strategy.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mtdecode.generate import GenerationResult, generate
from mtdecode.model import CausalLM
from mtdecode.strategies.autoregressive import Autoregressive
from mtdecode.strategy import DecodingStrategy
from mtdecode.testing.tolerance import near_tie


def greedy_tokens(model, prompt: Sequence[int], max_new_tokens: int, eos_token_id: int | None = None) -> list[int]:
    """The reference: `Autoregressive` greedy decoding, as a list of new tokens."""
    result = generate(model, list(prompt), Autoregressive(), max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
    return result.tokens[0].tolist()


def hf_greedy_tokens(model, prompt: Sequence[int], max_new_tokens: int, eos_token_id: int | None = None) -> list[int]:
    """transformers' own `generate(do_sample=False)` on the same model, as a list of new tokens."""
    hf = CausalLM.wrap(model).hf
    if max_new_tokens == 0:
        return []
    ids = torch.tensor([list(prompt)], device=hf.device)
    out = hf.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        do_sample=False,
        max_new_tokens=max_new_tokens,
        eos_token_id=eos_token_id,
        pad_token_id=hf.generation_config.pad_token_id,
        top_k=None,
        top_p=None,
        temperature=None,
    )
    return out[0, ids.shape[1] :].tolist()


def assert_greedy_parity(
    model,
    prompt: Sequence[int],
    strategy: DecodingStrategy,
    *,
    max_new_tokens: int,
    eos_token_id: int | None = None,
    seed: int = 0,
) -> GenerationResult:
    """Run `strategy` greedily and assert its tokens equal `Autoregressive` greedy's.

    Also asserts that the steps account for every token and that each step committed
    at least one. Returns the strategy's result for further checks.

    Greedy tokens never depend on the seed, but a strategy's guesses may (Jacobi and lookahead
    start from random prompt tokens), and with them its steps; `seed` fixes them, so that a
    test that looks at the steps repeats exactly.
    """
    expected = greedy_tokens(model, prompt, max_new_tokens, eos_token_id)
    result = generate(
        model, list(prompt), strategy, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, seed=seed
    )
    got = result.tokens[0].tolist()
    assert got == expected, (
        f"{type(strategy).__name__} greedy differs from autoregressive greedy at index "
        f"{_first_difference(got, expected)}:\n  got      {got}\n  expected {expected}"
    )
    assert [t for step in result.steps for t in step.tokens] == got, "steps do not add up to the output"
    assert all(len(step.tokens) >= 1 for step in result.steps)
    return result


@dataclass(frozen=True)
class NearTie:
    """Where two greedy runs part: the index, both tokens, their logits after the common prefix, and
    `allowed`, the largest gap rounding alone can reverse there (`mtdecode.testing.tolerance.near_tie`)."""

    index: int
    token_a: int
    token_b: int
    logit_a: float
    logit_b: float
    allowed: float

    @property
    def gap(self) -> float:
        return abs(self.logit_a - self.logit_b)

    @property
    def within_rounding(self) -> bool:
        """Whether rounding alone can explain that the two runs chose differently."""
        return self.gap <= self.allowed


def first_divergence(model, prompt: Sequence[int], a: Sequence[int], b: Sequence[int]) -> NearTie | None:
    """Where greedy outputs `a` and `b` first differ, and both tokens' logits there (`None` if they never differ).

    In float32, a forward over k tokens and k forwards over one token round differently,
    so two correct greedy decoders may pick different tokens where two logits nearly tie;
    `NearTie.within_rounding` says whether the gap there is small enough for that.
    """
    index = _first_difference(list(a), list(b))
    if index is None or index >= min(len(a), len(b)):
        return None
    hf = CausalLM.wrap(model).hf
    ids = torch.tensor([list(prompt) + list(a[:index])], device=hf.device)
    with torch.no_grad():
        logits = hf(ids).logits[0, -1]
    allowed = near_tie(model, logits, keys=ids.shape[1])
    return NearTie(index, a[index], b[index], float(logits[a[index]]), float(logits[b[index]]), allowed)


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
