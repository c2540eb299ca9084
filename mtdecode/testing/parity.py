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
) -> GenerationResult:
    """Run `strategy` greedily and assert its tokens equal `Autoregressive` greedy's.

    Also asserts that the steps account for every token and that each step committed
    at least one. Returns the strategy's result for further checks.
    """
    expected = greedy_tokens(model, prompt, max_new_tokens, eos_token_id)
    result = generate(model, list(prompt), strategy, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id)
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
    """Where two greedy runs part: the index, both tokens, and their logits after the common prefix."""

    index: int
    token_a: int
    token_b: int
    logit_a: float
    logit_b: float

    @property
    def gap(self) -> float:
        return abs(self.logit_a - self.logit_b)


def first_divergence(model, prompt: Sequence[int], a: Sequence[int], b: Sequence[int]) -> NearTie | None:
    """Where greedy outputs `a` and `b` first differ, and both tokens' logits there (`None` if they never differ).

    In float32, a forward over k tokens and k forwards over one token round differently,
    so two correct greedy decoders may pick different tokens where two logits nearly tie.
    """
    index = _first_difference(list(a), list(b))
    if index is None or index >= min(len(a), len(b)):
        return None
    hf = CausalLM.wrap(model).hf
    ids = torch.tensor([list(prompt) + list(a[:index])], device=hf.device)
    with torch.no_grad():
        logits = hf(ids).logits[0, -1]
    return NearTie(index, a[index], b[index], float(logits[a[index]]), float(logits[b[index]]))


def _first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))
