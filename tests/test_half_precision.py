"""Exactness tiers (`mtdecode.testing.ties`, `docs/concepts/rounding.md`): every exact strategy is bit-exact in
float64 and float32 and exact up to ties in bfloat16 and float16, on every device torch has (CUDA skipped, with the
reason, where torch sees none; `make test-cuda` runs these there). The tie-aware comparison itself: a difference
within the calibrated ε is a near-tie, one beyond it a bug, in either direction of the bound."""

import functools
import weakref

import pytest
import torch

from mtdecode.strategies import Autoregressive, Eagle, Jacobi, Lookahead, PromptLookup, Speculative
from mtdecode.testing import check_greedy, greedy_tokens, strategy_decoder, tiny_model
from mtdecode.testing.blackbox import greedy_model
from mtdecode.testing.models import perturbed
from mtdecode.testing.ties import calibrate, greedy_differences
from mtdecode.zoo.eagle import EagleHead

from conftest import DEVICES

pytestmark = pytest.mark.usefixtures("one_thread")

_HEADS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_DRAFTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def untrained_head(model) -> EagleHead:
    """A random head for `model` (the same one every time it is asked for)."""
    if model not in _HEADS:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(2)
            weights = model.get_input_embeddings().weight, model.get_output_embeddings().weight
            head = EagleHead(model.config, *weights, torch.arange(model.config.vocab_size))
        _HEADS[model] = head.to(device=model.device, dtype=model.dtype).eval()
    return _HEADS[model]


def noisy_draft(model):
    if model not in _DRAFTS:
        _DRAFTS[model] = perturbed(model, 0.3, seed=1)
    return _DRAFTS[model]


#: every exact strategy as the oracle's decoders, at fixed settings: on these tiny models their rules pick plain greedy
#: decoding where wide forwards (or the tiny draft's forwards, as dear as the target's) are slow (make test-hosts:
#: default kernels), and at its defaults EAGLE's random head spent most of the check measuring its costs (1,326
#: forwards for 98 tokens in bfloat16, against 84 at `tree_size=6`); a check that never saw a guess verified is
#: inconclusive
EXACT = {
    "autoregressive": lambda m: Autoregressive(),
    "speculative": lambda m: Speculative(noisy_draft(m.hf), num_draft_tokens=3),
    "jacobi": lambda m: Jacobi(block=8),
    "prompt_lookup": lambda m: PromptLookup(num_draft_tokens=4),
    "lookahead": lambda m: Lookahead(4, 3, 4),
    "eagle": lambda m: Eagle(untrained_head(m.hf), tree_size=6),
}
HALF = [torch.bfloat16, torch.float16]


# these ask what half precision does to the strategies' tokens; jaxtyping's `Float` takes every float dtype alike, so
# the types are those the strategies' own float32 and float64 tests check, and checking them made this file's tests
# about 30% slower (the suite's `--durations=0` summed by file: 56 s of test time checked, 40 s unchecked)
@pytest.mark.usefixtures("unchecked")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", HALF, ids=str)
@pytest.mark.parametrize("name", list(EXACT))
def test_every_exact_strategy_is_exact_up_to_ties_in_half_precision(name, dtype, device):
    report = check_greedy(strategy_decoder(EXACT[name]), families=("qwen2",), examples=10, dtype=dtype,
                          max_prompt=40, device=device, require_guesses=name != "autoregressive")  # fmt: skip
    assert report.passed, str(report)
    assert report.figures["tier"] == "exact up to ties" and report.figures["epsilon"] >= 0


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
def test_float64_and_float32_are_bit_exact(dtype, device):
    report = check_greedy(strategy_decoder(EXACT["lookahead"]), families=("llama",), examples=12, dtype=dtype,
                          max_prompt=40, device=device)  # fmt: skip
    assert report.passed and report.figures["tier"] == "bit-exact", str(report)


@functools.cache
def runner_up_case(dtype: torch.dtype):
    """A prompt, greedy's 8 tokens for it on the tiny Llama in `dtype`, a position, and the text with greedy's token
    there replaced by its runner-up: (prompt, greedy, index, wrong text, the runner-up's gap)."""
    model = greedy_model("llama", dtype)
    prompt = [3, 1, 4, 1, 5]
    greedy = greedy_tokens(model, prompt, 8)
    index = 2
    with torch.no_grad():
        logits = model(torch.tensor([prompt + greedy[:index]])).logits[0, -1].double()
    top = logits.topk(2)
    wrong = greedy[:index] + [int(top.indices[1])]
    return model, prompt, index, wrong, float(top.values[0] - top.values[1])


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16], ids=str)
def test_a_difference_within_epsilon_is_a_near_tie_and_beyond_it_a_bug(dtype):
    """The runner-up taken instead of greedy's token: one `Difference` at that index, whose gap is greedy's top-2
    margin; it is a near-tie exactly when the bound is at least that gap."""
    model, prompt, index, wrong, gap = runner_up_case(dtype)
    assert greedy_differences(model, prompt, greedy_tokens(model, prompt, index + 1)) == []
    for epsilon, near in ((gap * 1.01 + 1e-12, True), (gap * 0.99, False)):
        (difference,) = greedy_differences(model, prompt, wrong, epsilon=epsilon)
        assert difference.index == index and difference.got == wrong[index]
        assert difference.gap == pytest.approx(gap) and difference.top2 == pytest.approx(gap)
        assert difference.near_tie is near
        assert ("near-tie (allowed)" in difference.describe()) is near and ("bug" in difference.describe()) is not near


def test_epsilon_follows_the_precision():
    """The calibrated bound follows the unit roundoff: far below any logit gap in float64 and float32, and larger in
    half precision than in float32, but still a small part of the logits' range."""
    models = {dtype: tiny_model("llama", vocab_size=16, seed=3, dtype=dtype)
              for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16)}  # fmt: skip
    bounds = {dtype: calibrate(model) for dtype, model in models.items()}
    assert bounds[torch.float64].epsilon < 1e-10 and bounds[torch.float32].epsilon < 1e-3
    for half in HALF:
        assert bounds[torch.float32].epsilon < bounds[half].epsilon < bounds[half].largest_logit / 10
