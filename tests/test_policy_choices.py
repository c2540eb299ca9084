"""The adaptive drafting policy's per-step choices, on fixed costs and fixed prompts, against a record kept in
`tests/data/policy_choices.json`.

Every strategy with a rule runs on a tiny Llama pair (a target and a perturbed copy as its draft) with costs fixed
by hand: a curve close to the reference host's forward costs of SmolLM2-135M-Instruct for one row (t(n) / t(1) as
shipped in `mtdecode/zoo/costs`, but for t(8), 1.2208 here against 1.2442 shipped), a draft forward at 0.175 of a
target forward, and for four rows that curve's rise doubled (where the batch mostly rests and tries) or times 1.3
(where it mostly drafts). For each strategy and setting (one prompt sampled; three ragged prompts weighed as a
batch, greedy and sampled, and row by row) the record holds, row by row and step by step, how many guesses the step
verified, how many it kept and how many tokens it committed. Refactoring the policy must leave every number as it
is: a different record means the rule chooses differently, which this test shows as the first step that differs.

`python tests/test_policy_choices.py --write` writes the record from the code at hand.
"""

import json
import sys
from pathlib import Path

import pytest
import torch

import mtdecode
from mtdecode.costs import BatchCosts, DraftCosts
from mtdecode.policy import Adaptive, search
from mtdecode.strategies import MTAD, Eagle, Jacobi, Lookahead, PromptLookup, Speculative
from mtdecode.testing import tiny_model
from mtdecode.testing.models import perturbed
from mtdecode.zoo.eagle import EagleHead

RECORD = Path(__file__).parent / "data" / "policy_choices.json"
VOCAB = 16

#: t(n) / t(1) for n = 1, 2, 4, 6, 8, 12, 16, 24, fixed by hand after the reference host's (the record depends on them)
REFERENCE_SIZES = (1, 2, 4, 6, 8, 12, 16, 24)
REFERENCE_CURVE = (1.0, 0.9988, 1.0536, 1.1246, 1.2208, 1.3623, 1.4806, 1.8051)


def curve(steepness: float, longest: int = 40) -> list[float]:
    """t(1..longest): the reference curve, its rise above 1 times `steepness`, linear between the sizes."""
    points = [(n, 1 + steepness * (t - 1)) for n, t in zip(REFERENCE_SIZES, REFERENCE_CURVE, strict=True)]
    out = []
    for n in range(1, longest + 1):
        below = max((p for p in points if p[0] <= n), key=lambda p: p[0])
        above = min((p for p in points if p[0] >= n), key=lambda p: p[0], default=None)
        if above is None:
            (n0, t0), (n1, t1) = points[-2], points[-1]
            out.append(t1 + (t1 - t0) / (n1 - n0) * (n - n1))
        elif above[0] == below[0]:
            out.append(below[1])
        else:
            out.append(below[1] + (above[1] - below[1]) * (n - below[0]) / (above[0] - below[0]))
    return out


ROW = DraftCosts(draft=0.175, target=curve(1.0), overhead=0.05)
STEEP = BatchCosts({1: ROW, 4: DraftCosts(draft=0.25, target=curve(2.0))}, margin=0.05)
MILD = BatchCosts({1: ROW, 4: DraftCosts(draft=0.2, target=curve(1.3))}, margin=0.05)


def models():
    target = tiny_model("llama", vocab_size=VOCAB, seed=3)
    return target, perturbed(target, 0.1, seed=1)


def head(target) -> EagleHead:
    torch.manual_seed(2)
    weights = target.get_input_embeddings().weight, target.get_output_embeddings().weight
    return EagleHead(target.config, *weights, torch.arange(VOCAB)).to(target.dtype).eval()


def strategies(target, draft, costs):
    """Every strategy with a rule, weighing `costs`."""
    return {
        "speculative": Speculative(draft, policy=Adaptive(costs=costs, acceptance=0.4)),
        "mtad": MTAD(draft, beam_width=2, policy=Adaptive(costs=costs, acceptance=0.4)),
        "prompt_lookup": PromptLookup(policy=Adaptive(costs=costs)),
        "jacobi": Jacobi(policy=Adaptive(costs=costs, acceptance=0.3)),
        "eagle": Eagle(head(target), depth=3, width=3, policy=Adaptive(costs=costs, depth_cost=0.05, read_cost=0.05)),
        "lookahead": Lookahead(window=2, ngram=3, guesses=None, policy=Adaptive(costs=costs)),
    }


PROMPT = [1, 2, 3, 1, 2, 3, 4]
RAGGED = [[1, 2, 3, 1, 2], [9, 8, 7, 6, 5, 9, 8], [4]]
SETTINGS = {  # name -> (prompts, costs, sampling)
    "one row sampled": (PROMPT, ROW, {"temperature": 1.0, "seed": 5}),
    "batch greedy": (RAGGED, STEEP, {"seed": 3}),
    "batch sampled": (RAGGED, MILD, {"temperature": 1.0, "seed": 7}),
    "rows alone greedy": (RAGGED, ROW, {"seed": 4}),
}


def record() -> dict[str, dict[str, list[list[list[int]]]]]:
    """setting -> strategy -> row -> [drafted, accepted, tokens committed] per step."""
    target, draft = models()
    out: dict = {}
    for setting, (prompts, costs, sampling) in SETTINGS.items():
        out[setting] = {}
        rows = len(prompts) if isinstance(prompts[0], list) else 1
        for name, strategy in strategies(target, draft, costs).items():
            with pytest.MonkeyPatch.context() as patch:  # lookahead's settings, fixed
                patch.setattr(search, "lookahead_plan", lambda *a, **k: ((2, 3, 4), None))
                result = mtdecode.generate(target, prompts, strategy, max_new_tokens=40, pad_token_id=0, **sampling)
            out[setting][name] = [
                [[s.drafted, s.accepted, len(s.tokens)] for s in result.steps_of(b)] for b in range(rows)
            ]
    return out


@pytest.fixture(scope="module")
def now():
    return record()


@pytest.mark.parametrize("setting", SETTINGS)
@pytest.mark.parametrize("name", ["speculative", "mtad", "prompt_lookup", "jacobi", "eagle", "lookahead"])
def test_every_strategys_per_step_choices_are_as_recorded(now, setting, name):
    kept = json.loads(RECORD.read_text())[setting][name]
    got = now[setting][name]
    for b, (want, have) in enumerate(zip(kept, got, strict=True)):
        first = next((i for i, (x, y) in enumerate(zip(want, have, strict=False)) if x != y), None)
        assert first is None and len(want) == len(have), (
            f"row {b}: step {first} differs: recorded {want[first : first + 3] if first is not None else want[-1:]}, "
            f"now {have[first : first + 3] if first is not None else have[-1:]}"
        )


def test_the_record_drafts_varies_and_rests():
    """The record is worth keeping: in it the rules draft in some steps and not in others, and vary the width."""
    kept = json.loads(RECORD.read_text())
    for setting, by_name in kept.items():
        for name, rows in by_name.items():
            drafted = [step[0] for row in rows for step in row]
            assert any(drafted), (setting, name)
    widths = {step[0] for by_name in kept.values() for rows in by_name.values() for row in rows for step in row}
    assert len(widths) > 4 and 0 in widths


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    RECORD.parent.mkdir(exist_ok=True)
    RECORD.write_text(json.dumps(record(), indent=None, separators=(",", ":")) + "\n")
    print(f"wrote {RECORD}")
