"""Exactness tiers: bit-exact in float64 and float32, exact up to ties in bfloat16 and float16.

A strategy that verifies k + 1 tokens in one forward reads logits that a 1-token forward would
have computed in another order of additions, so they differ in the last bits. In float64 and
float32 those bits are far below any gap between two tokens' logits, and every exact strategy
gives greedy decoding's tokens one for one (**tier 1, bit-exact**; float32 with TF32 off). In
bfloat16 and float16 they are not: at logits of 16 to 40 one bfloat16 step is 0.125 to 0.25,
and where greedy's two best tokens are that close the two paths may pick different ones
(**tier 2, exact up to ties**). A divergence there is allowed only where the reference's gap is
within a bound ε that is measured, not guessed:

- `calibrate(model)` feeds the same text to the model twice: once as greedy decoding does (the
  prompt, then one token per forward), once as a verifier does (chunks of k tokens per forward,
  k = 2 ... 64, and as one row of a padded batch), and takes δ, the largest difference of any
  logit between the two paths, but at least one rounding step of the dtype at the largest logit:
  a decoder's path the calibration did not take (hidden columns of rejected guesses, another
  cache length) may round where these did not, and the least it can then move a logit is that
  step (with the default kernels, `ATEN_CPU_CAPABILITY=default`, the two paths above agree bit
  for bit and the decoders still flip at one step). If the decoder's path is off by at most δ
  per logit, the token it picks trails greedy's by at most 2δ in greedy's logits, so ε = 2δ
  (`TieBound`).
- `greedy_differences(model, prompt, tokens)` reads a decoder's tokens as greedy decoding would
  (one token per forward, on the decoder's own text) and returns every position where the
  decoder did not take the argmax, with the gap between the argmax's logit and its token's
  (`Difference`): a gap within ε is a near-tie (allowed in tier 2), a larger one is a bug.

A decoder that runs **its own copy** of the model (an engine's kernels on the same weights, a GGUF
file in llama.cpp) adds in its own order everywhere, not only in verification forwards: in every
dtype it is judged exact up to ties, with `other_implementation_bound(model)`: δ is
`LOGIT_TOLERANCE` of the largest logit (the most two implementations of the same weights may
differ by, the tolerance the bridge also holds models to), or the calibrated δ if larger.

Ties are broken one way on every path: the lowest token id (`torch.argmax`). The oracle's
`check_greedy(..., dtype=...)`, `mtdecode check --dtype` and `benchmarks/flip_rate.py` use these.
"""

import dataclasses
import math
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mtdecode.model import CausalLM, Runner
from mtdecode.tensor_types import Float, Tensor

#: dtypes whose decoders must equal greedy decoding token for token (tier 1); every other dtype is tier 2
BIT_EXACT = (torch.float64, torch.float32)
#: verification widths `calibrate` compares with 1-token forwards (a verifier's chain, tree or window)
WIDTHS = (2, 4, 8, 16, 32, 64)

#: how far another implementation's logits of the same weights may lie from the oracle's, relative to the largest
#: logit, by dtype: other orders of additions, and parts of a float64 model run in float32 by older libraries
LOGIT_TOLERANCE = {torch.float64: 1e-5, torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 5e-2}

_BOUNDS: "weakref.WeakKeyDictionary[CausalLM, TieBound]" = weakref.WeakKeyDictionary()


def tier(dtype: torch.dtype) -> str:
    """`"bit-exact"` for float64 and float32, `"exact up to ties"` for every other dtype."""
    return "bit-exact" if dtype in BIT_EXACT else "exact up to ties"


@dataclass(frozen=True)
class TieBound:
    """How far rounding alone can move a greedy choice for one model, dtype and device.

    - `delta`: the largest |logit difference| `calibrate` found between verification forwards and 1-token ones, or
      `step` if that is larger;
    - `epsilon`: 2 * delta, the largest gap between greedy's token and another that rounding can reverse;
    - `step`: one rounding step of the dtype at the largest logit, the least a rounding difference can be;
    - `largest_logit`: the largest |logit| seen (one dtype step there is the resolution of a gap);
    - `positions`: how many logit rows were compared; `widths`: the verification widths.
    """

    dtype: str
    device: str
    delta: float
    epsilon: float
    step: float
    largest_logit: float
    positions: int
    widths: tuple[int, ...]
    #: "rounding" (`calibrate`), or "another implementation" (`other_implementation_bound`)
    source: str = "rounding"

    def __str__(self) -> str:
        if self.source == "another implementation":
            return (
                f"ε = {self.epsilon:.3g} for another implementation of these {self.dtype} weights: twice "
                f"{LOGIT_TOLERANCE[getattr(torch, self.dtype)]:g} of the largest logit ({self.largest_logit:.3g}), "
                "the most two implementations' logits may differ by, or the calibrated rounding bound if larger"
            )
        return (
            f"ε = {self.epsilon:.3g} for {self.dtype} on {self.device}: twice the largest logit difference "
            f"({self.delta:.3g}) between verification forwards over {min(self.widths)} to {max(self.widths)} tokens "
            f"(alone and batched) and 1-token forwards, over {self.positions} positions (logits up to "
            f"{self.largest_logit:.3g}), and at least one {self.dtype} step there ({self.step:.3g})"
        )


def calibrate(
    model,
    prompts: Sequence[Sequence[int]] | None = None,
    *,
    tokens: int = 64,
    widths: Sequence[int] = WIDTHS,
    seed: int = 0,
) -> TieBound:
    """Measure ε for `model` in its dtype on its device (see the module docstring).

    **Arguments:**

    - `prompts`: texts of at least 2 tokens to continue (default: two prompts of random tokens, 12 and 40 long,
      drawn with `seed`; that bound is kept for the model for the rest of the process).
    - `tokens`: how many greedy tokens each prompt is continued by; every logit row of them is compared.
    - `widths`: the numbers of tokens per verification forward.
    """
    adapter = CausalLM.wrap(model)
    default = prompts is None and tokens == 64 and tuple(widths) == WIDTHS and seed == 0
    if default and adapter in _BOUNDS:
        return _BOUNDS[adapter]
    generator = torch.Generator().manual_seed(seed)
    if prompts is None:
        prompts = [torch.randint(0, adapter.vocab_size, (n,), generator=generator).tolist() for n in (12, 40)]
    if any(len(prompt) < 2 for prompt in prompts):
        raise ValueError("calibrate needs prompts of at least 2 tokens")
    tokens = max(1, min(tokens, adapter.max_length - max(map(len, prompts)) - 6))
    delta, largest, positions = 0.0, 0.0, 0
    for prompt in prompts:
        text, reference = _greedy_path(adapter, list(prompt), tokens)  # (tokens, vocab)
        largest = max(largest, float(reference.abs().max()))
        positions += reference.shape[0]
        for width in widths:
            chunked = _chunked_path(adapter, list(prompt), text, width)
            delta = max(delta, float((chunked - reference).abs().max()))
        other = torch.randint(0, adapter.vocab_size, (len(prompt) + 5,), generator=generator).tolist()
        batched = _chunked_path(adapter, list(prompt), text, max(widths), beside=other)
        delta = max(delta, float((batched - reference).abs().max()))
    step = rounding_step(adapter.dtype, largest)
    delta = max(delta, step)
    dtype = str(adapter.dtype).removeprefix("torch.")
    bound = TieBound(dtype, str(adapter.device), delta, 2 * delta, step, largest, positions, tuple(widths))
    if default:
        _BOUNDS[adapter] = bound
    return bound


def other_implementation_bound(model) -> TieBound:
    """ε for a decoder that runs its own copy of `model` (see the module docstring): twice the larger of
    `LOGIT_TOLERANCE` of the largest logit and the calibrated δ."""
    measured = calibrate(model)
    dtype = CausalLM.wrap(model).dtype
    delta = max(measured.delta, LOGIT_TOLERANCE[dtype] * measured.largest_logit)
    return dataclasses.replace(measured, delta=delta, epsilon=2 * delta, source="another implementation")


def rounding_step(dtype: torch.dtype, magnitude: float) -> float:
    """One step of `dtype` at `magnitude`: the spacing of its numbers there (its unit roundoff times the power of two
    at or below `magnitude`)."""
    if magnitude <= 0:
        return 0.0
    return torch.finfo(dtype).eps * 2.0 ** math.floor(math.log2(magnitude))


def _greedy_path(model: CausalLM, prompt: list[int], tokens: int) -> tuple[list[int], Float[Tensor, "new vocab"]]:
    """Greedy decoding's own forwards: the prompt in one, then one token each. Returns the prompt's last token and
    the new tokens but the last (what the next forwards read), and the logits that chose each new token."""
    runner = Runner(model, "reference")
    logits = [runner.extend([prompt], logits_to_keep=1)[0, -1]]
    runner.cache.commit()
    for _ in range(tokens - 1):
        logits.append(runner.extend([[int(logits[-1].argmax())]])[0, -1])
        runner.cache.commit()
    stacked = torch.stack(logits).double()
    return [prompt[-1], *stacked.argmax(-1).tolist()[:-1]], stacked


def _chunked_path(
    model: CausalLM, prompt: list[int], text: list[int], width: int, beside: list[int] | None = None
) -> Float[Tensor, "new vocab"]:
    """A verifier's forwards over the same text: the prompt but its last token in one, then `width` tokens each
    (as row 0 of a batch of two, left padded, if `beside` gives the other row's prompt)."""
    runner = Runner(model, "verifier")
    others = [] if beside is None else [beside]
    runner.extend([prompt[:-1], *others])
    runner.cache.commit()
    logits = []
    for start in range(0, len(text), width):
        chunk = text[start : start + width]
        logits.append(runner.extend([chunk, *[row[-1:] * len(chunk) for row in others]])[0])
        runner.cache.commit()
    return torch.cat(logits).double()


@dataclass(frozen=True)
class Difference:
    """One position where a decoder's token is not greedy decoding's argmax on the decoder's own text.

    - `index`: the position among the new tokens (0-based); `expected`: the argmax; `got`: the decoder's token;
    - `gap`: greedy's logit of `expected` minus that of `got` (> 0, or 0 for an exact tie broken the other way);
    - `top2`: greedy's margin between its two best tokens there;
    - `epsilon`: the calibrated bound the gap is judged against (None where it was not measured).
    """

    index: int
    expected: int
    got: int
    gap: float
    top2: float
    epsilon: float | None

    @property
    def near_tie(self) -> bool:
        """Whether rounding alone can explain it: the gap is within ε."""
        return self.epsilon is not None and self.gap <= self.epsilon

    def describe(self, allowed: bool = True) -> str:
        """One line: where, both tokens, the margins against ε, and the verdict (`allowed`: near-ties are)."""
        bound = "ε not measured" if self.epsilon is None else f"ε = {self.epsilon:.3g}"
        verdict = "near-tie (allowed)" if self.near_tie and allowed else "near-tie, but tier 1 allows none" if (
            self.near_tie) else "bug"  # fmt: skip
        return (
            f"index {self.index}: greedy's token {self.expected}, the decoder's {self.got}; greedy's logit gap between "
            f"them {self.gap:.4g} (its top-2 margin {self.top2:.4g}) against {bound}: {verdict}"
        )


def greedy_differences(
    model,
    prompt: Sequence[int],
    got: Sequence[int],
    *,
    epsilon: float | None = None,
) -> list[Difference]:
    """Every position where `got` (a decoder's new tokens after `prompt`) is not greedy's argmax, read with greedy
    decoding's own forwards on the decoder's text. An empty list means `got` is exactly greedy decoding's output
    (for its length; the caller checks the length against the budget and EOS)."""
    adapter = CausalLM.wrap(model)
    runner = Runner(adapter, "reference")
    logits = runner.extend([list(prompt)], logits_to_keep=1)[0, -1]
    runner.cache.commit()
    differences = []
    for i, token in enumerate(got):
        row = logits.double()
        best = int(row.argmax())
        if token != best:
            top = row.topk(2).values
            gap, top2 = float(row[best] - row[token]), float(top[0] - top[1])
            differences.append(Difference(i, best, int(token), gap, top2, epsilon))
        if i + 1 < len(got):
            logits = runner.extend([[int(token)]])[0, -1]
            runner.cache.commit()
    return differences
