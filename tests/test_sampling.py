"""The Sampler: reproducible with a seed, and its draws follow its stated distribution.

Statistical tests use `mtdecode.testing.chi_square_test` with a false-alarm rate of 1e-3:
if the sampler is right, each such test fails with probability 1e-3 (the seeds are
fixed, so a pass is a pass on every run). Each is shown to catch a wrong sampler.
"""

from dataclasses import dataclass

import pytest
import torch

import mtdecode
from mtdecode import Sampler
from mtdecode.sampling import RowRandom
from mtdecode.strategies import Autoregressive
from mtdecode.testing import chi_square_test, tiny_model

DRAWS = 20_000
FALSE_ALARM = 1e-3
LOGITS = torch.tensor([2.0, 1.5, 1.4, 0.3, 0.0, -0.5, -1.0, -3.0, 0.9, 1.1, -2.0, 0.2], dtype=torch.float64)
SETTINGS = [
    Sampler(temperature=1.0),
    Sampler(temperature=0.7),
    Sampler(temperature=1.5, top_k=4),
    Sampler(temperature=0.9, top_p=0.8),
    Sampler(temperature=1.2, top_k=6, top_p=0.9),
]


def counts_of(sampler: Sampler, logits: torch.Tensor, seed: int = 0) -> torch.Tensor:
    random = RowRandom(range(seed, seed + DRAWS))  # one draw from each of DRAWS independent streams
    draws = sampler.sample(logits.expand(DRAWS, -1), random)  # (draws,)
    return torch.bincount(draws, minlength=logits.shape[-1])


def expected_probs(temperature: float, top_k: int | None, top_p: float | None, logits: torch.Tensor) -> torch.Tensor:
    """Written from the definition, token by token: temper, keep the top k, keep the nucleus."""
    scores = (logits / temperature).tolist()
    order = sorted(range(len(scores)), key=lambda i: -scores[i])
    allowed = set(order[:top_k]) if top_k is not None else set(order)
    weights = {i: torch.tensor(scores[i]).exp().item() for i in allowed}
    total = sum(weights.values())
    probs = {i: w / total for i, w in weights.items()}
    if top_p is not None:
        kept, mass = [], 0.0
        for i in sorted(probs, key=lambda i: -probs[i]):
            if mass >= top_p:
                break
            kept.append(i)
            mass += probs[i]
        probs = {i: probs[i] / mass for i in kept}
    return torch.tensor([probs.get(i, 0.0) for i in range(len(scores))], dtype=torch.float64)


@pytest.mark.parametrize("sampler", SETTINGS, ids=str)
def test_probs_follow_the_definition(sampler):
    expected = expected_probs(sampler.temperature, sampler.top_k, sampler.top_p, LOGITS)
    torch.testing.assert_close(sampler.probs(LOGITS), expected)


@pytest.mark.parametrize("sampler", SETTINGS, ids=str)
def test_draws_match_the_distribution(sampler):
    result = chi_square_test(counts_of(sampler, LOGITS), sampler.probs(LOGITS), false_alarm=FALSE_ALARM)
    assert result.passed, str(result)


@dataclass(frozen=True)
class TemperatureTwice(Sampler):
    """Mutant: divides the logits by the temperature twice."""

    def probs(self, logits):
        return super().probs(logits / self.temperature)


@pytest.mark.parametrize("temperature", [0.7, 1.5])
def test_the_test_catches_temperature_applied_twice(temperature):
    right, wrong = Sampler(temperature=temperature), TemperatureTwice(temperature=temperature)
    result = chi_square_test(counts_of(wrong, LOGITS), right.probs(LOGITS), false_alarm=FALSE_ALARM)
    assert not result.passed, str(result)


def test_greedy_probs_are_one_hot_on_the_argmax():
    probs = Sampler().probs(LOGITS)
    assert probs.sum() == 1 and probs[LOGITS.argmax()] == 1


def test_generate_samples_from_the_sampler_distribution():
    """End to end through `generate`: the first sampled token of many seeded runs."""
    model = tiny_model("llama", vocab_size=12, seed=5)
    prompt = [3, 1, 4]
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0, -1]
    sampler = Sampler(temperature=0.8, top_k=8)
    runs = mtdecode.generate(  # 2,000 seeded runs, as the rows of one batch (row b: seed b)
        model, [prompt] * 2000, Autoregressive(), max_new_tokens=1, temperature=0.8, top_k=8, seed=0
    )
    counts = torch.bincount(runs.tokens[:, 0], minlength=12)
    result = chi_square_test(counts, sampler.probs(logits), false_alarm=FALSE_ALARM)
    assert result.passed, str(result)


@pytest.mark.parametrize("counts", [torch.tensor([0, 3, 1]), torch.tensor([2, 0, 5]), 4], ids=str)
def test_skipping_numbers_leaves_a_stream_where_drawing_them_does(counts):
    """`skip(counts)`, which the greedy shortcuts use in place of numbers they would ignore, moves every row's stream
    exactly as far as `uniform(counts)`: the next numbers agree bit for bit."""
    drawing, skipping = RowRandom([5, 6, 7]), RowRandom([5, 6, 7])
    drawing.uniform(counts)
    skipping.skip(counts)
    assert torch.equal(drawing.uniform(3), skipping.uniform(3))


def test_a_seed_reproduces_a_run():
    model = tiny_model("qwen2", vocab_size=32, seed=3)
    runs = [
        mtdecode.generate(model, [1, 2], Autoregressive(), max_new_tokens=20, temperature=1.0, top_p=0.95, seed=s)
        for s in (7, 7, 8)
    ]
    assert torch.equal(runs[0].tokens, runs[1].tokens)
    assert not torch.equal(runs[0].tokens, runs[2].tokens)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
    ],
)
def test_nonsense_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Sampler(**kwargs)
