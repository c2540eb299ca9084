"""Every tuned strategy reports what it chose and why in `result.stats.choices`, and a strategy that decodes a whole
run greedily because of its tuning says so once, with `mtdecode.GreedyFallbackWarning`.

The costs are forced, never measured, so that each choice is the same on every host: `timing.forward_costs` is
replaced by a steep curve (no lookahead setting pays) or a flat one (the widest pays), and the drafting strategies
are given `DraftCosts` where a first guess can never pay (a forward over 2 tokens costs 3 of 1) or always does.
"""

import functools
import re
import warnings

import pytest
import torch

import mtdecode
from mtdecode.costs import DraftCosts, timing
from mtdecode.policy import Adaptive, search
from mtdecode.strategies import MTAD, Eagle, Lookahead, PromptLookup, Speculative
from mtdecode.testing import greedy_tokens, tiny_model
from mtdecode.testing.models import perturbed
from mtdecode.zoo.eagle import EagleHead

VOCAB = 16
PROMPT = [*range(VOCAB), 1, 2, 3, 1, 2]  # every token has a past: prompt lookup finds a copy at every step
#: no guess can pay: one more token in a forward costs twice a whole 1-token forward
DEAR = DraftCosts(draft=0.0, target=[1.0, 3.0, 5.0])
#: a guess accepted half the time does not pay, one always accepted would: worth a try now and then
TRYABLE = DraftCosts(draft=0.0, target=[1.0, 1.7, 2.4])
#: every guess pays: wider forwards cost nothing more
FREE = DraftCosts(draft=0.0, target=[1.0, 1.0, 1.0])


@functools.cache
def model():
    return tiny_model("llama", vocab_size=VOCAB, seed=3)


@functools.cache
def draft():
    return perturbed(model(), 0.05, seed=1)


@functools.cache
def head() -> EagleHead:
    torch.manual_seed(0)
    m = model()
    tokens = torch.arange(VOCAB)
    head = EagleHead(m.config, m.get_input_embeddings().weight, m.get_output_embeddings().weight, tokens)
    return head.to(m.dtype).eval()


def run(strategy, max_new_tokens: int, prompts=PROMPT):
    """`generate` greedily, with every `GreedyFallbackWarning` it raises."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = mtdecode.generate(model(), prompts, strategy, max_new_tokens=max_new_tokens, seed=0)
    return result, [w for w in caught if issubclass(w.category, mtdecode.GreedyFallbackWarning)]


def costs_curve(steep: bool, monkeypatch) -> None:
    """Lookahead's tuning on a forced curve, with measurements that do not scatter."""
    curve = {n: 1.0 if n == 1 else 0.9 * n + 0.1 for n in timing.SIZES} if steep else dict.fromkeys(timing.SIZES, 1.0)
    monkeypatch.setattr(timing, "forward_costs", lambda _model, rows=1, **_: curve)
    monkeypatch.setattr(timing, "scatter", lambda _model, rows=1, **_: dict.fromkeys(timing.SIZES, 0.0))
    monkeypatch.setattr(timing, "uncertainty", lambda _model, rows: dict.fromkeys(timing.SIZES, 0.0))  # a batch's


# ----------------------------------------------------------------------------- Lookahead


def test_lookahead_that_falls_back_to_greedy_says_why_and_warns_once(monkeypatch):
    costs_curve(steep=True, monkeypatch=monkeypatch)
    result, warned = run(Lookahead(), 12, prompts=[PROMPT, PROMPT[:5]])  # a batch: still one warning per call
    assert result.row(0) == greedy_tokens(model(), PROMPT, 12)
    assert result.row(1) == greedy_tokens(model(), PROMPT[:5], 12)
    (choice,) = result.stats.choices
    assert choice.greedy and choice.strategy == "Lookahead" and choice.setting == "decodes greedily"
    assert "within the measurement's scatter of 0% of 1" in choice.reason
    forced = re.search(r"Lookahead\((\d+), (\d+), (\d+)\) forces it", choice.reason)
    assert forced, choice.reason
    assert len(warned) == 1 and str(warned[0].message) == str(choice)
    assert str(choice).startswith("Lookahead: decodes greedily: its best setting W=")
    assert "\n" not in str(choice)
    assert warned[0].filename == __file__  # the warning points at the `generate` call
    # the setting it names does look ahead, and forcing it neither falls back nor warns
    forced_result, warned = run(Lookahead(*map(int, forced.groups())), 12)
    assert not warned and forced_result.stats.choices == ()
    assert any(step.drafted for step in forced_result.steps)


def test_lookahead_records_the_setting_it_chose_and_does_not_warn(monkeypatch):
    costs_curve(steep=False, monkeypatch=monkeypatch)
    result, warned = run(Lookahead(), 12)
    assert not warned
    assert result.row(0) == greedy_tokens(model(), PROMPT, 12)
    chosen, candidates = result.stats.choices
    w, n, g = search.lookahead_plan(mtdecode.CausalLM.wrap(model()), None, None, None, prompt_pool=True)[0]
    assert not chosen.greedy and chosen.setting == f"W={w}, N={n}, G={g} (at most)"
    assert re.match(r"predicted \d+\.\d\dx greedy on this host's forward costs, beyond their 0% scatter", chosen.reason)
    # G was tuned, so the candidate rule reports too: its counts match the steps
    drafting = sum(step.drafted > 0 for step in result.steps)
    assert candidates.strategy == "Lookahead" and not candidates.greedy
    assert f"({drafting} of {len(result.steps)} row steps drafted)" in candidates.setting


def test_a_value_given_is_marked_and_three_given_leave_nothing_to_report(monkeypatch):
    costs_curve(steep=True, monkeypatch=monkeypatch)
    result, warned = run(Lookahead(window=2), 6)  # the user asked for lookahead: no fallback, whatever the cost
    assert not warned and result.stats.choices[0].setting.startswith("W=2 (given), N=")
    result, warned = run(Lookahead(2, 3, 2), 6)
    assert not warned and result.stats.choices == ()


def test_stats_still_construct_without_choices():
    stats = mtdecode.Stats(new_tokens=3, target_forwards=3, draft_forwards=0, seconds=0.1)
    assert stats.choices == () and stats.tokens_per_forward == 0.0  # no row forwards given
    choice = mtdecode.Choice("X", "decodes greedily", "because", greedy=True)
    assert str(choice) == "X: decodes greedily: because"


# ----------------------------------------------------------------------------- the drafting rules


def drafting(kind: str, costs: DraftCosts):
    return {
        "speculative": lambda: Speculative(draft(), policy=Adaptive(costs=costs)),
        "mtad": lambda: MTAD(draft(), policy=Adaptive(costs=costs)),
        "prompt_lookup": lambda: PromptLookup(policy=Adaptive(costs=costs)),
        "eagle": lambda: Eagle(head(), depth=2, width=2, lookup=3, policy=Adaptive(costs=costs, depth_cost=0.0)),
    }[kind]()


KINDS = ["speculative", "mtad", "prompt_lookup", "eagle"]
#: what each strategy's choice calls its guesses
GUESSES = {"speculative": "guesses", "mtad": "guesses", "prompt_lookup": "copied tokens", "eagle": "nodes"}


@pytest.mark.parametrize("kind", KINDS)
def test_a_rule_under_which_no_guess_pays_decodes_greedily_and_warns_once(kind):
    """4 tokens: the rule stops every row step that could draft (a row tries one guess only after 4 idle steps)."""
    result, warned = run(drafting(kind, DEAR), 4)
    assert result.row(0) == greedy_tokens(model(), PROMPT, 4)
    assert all(step.drafted == 0 for step in result.steps)
    (choice,) = result.stats.choices
    assert choice.greedy and choice.setting == "decodes greedily"
    declined = int(re.match(r"(\d+) of its 4 row steps drafted nothing because", choice.reason).group(1))
    assert declined == (2 if kind == "eagle" else 3)  # the last step has no room for a guess; Eagle's first is plain
    assert re.search(r"; \w+\(.*\) (drafts|verifies) .* every step$", choice.reason)
    assert len(warned) == 1 and str(warned[0].message) == str(choice)


@pytest.mark.parametrize("kind", KINDS)
def test_a_rule_that_drafts_records_its_guesses_and_does_not_warn(kind):
    result, warned = run(drafting(kind, FREE), 10)
    if kind != "mtad":  # MTAD accepts by likelihood, not greedy's tokens
        assert result.row(0) == greedy_tokens(model(), PROMPT, 10)
    assert not warned
    (choice,) = result.stats.choices
    drafted = [step.drafted for step in result.steps if step.drafted]
    assert not choice.greedy and drafted
    mean, steps = sum(drafted) / len(drafted), len(result.steps)
    assert choice.setting == (
        f"{mean:.1f} {GUESSES[kind]} verified per drafting step ({len(drafted)} of {steps} row steps drafted)"
    )
    assert choice.reason.startswith("0 row steps drafted nothing because")


def test_a_long_run_that_tries_again_is_not_a_fallback():
    """With no guess paying at the prior acceptance, a row still tries one after 4 idle steps while more than twice
    that many tokens are left: over 20 tokens it drafts, so no warning, and the choice counts the row steps it held
    back."""
    result, warned = run(Speculative(draft(), policy=Adaptive(costs=TRYABLE, acceptance=0.5)), 20)
    assert not warned
    (choice,) = result.stats.choices
    held = int(re.match(r"(\d+) row steps drafted nothing", choice.reason).group(1))
    tried = sum(step.drafted > 0 for step in result.steps)
    assert not choice.greedy and tried >= 1 and held >= 4
    # every step drafted or was held back, but perhaps the last, which may have no room for a guess
    assert len(result.steps) - 1 <= held + tried <= len(result.steps)


def test_a_fixed_number_of_guesses_reports_nothing():
    result, warned = run(Speculative(draft(), num_draft_tokens=2), 6)
    assert not warned and result.stats.choices == ()


# ----------------------------------------------------------------------------- the command line


def test_generate_prints_the_choice_and_no_python_warning(monkeypatch, tmp_path, capsys, one_thread):
    from mtdecode.cli import main
    from mtdecode.testing.models import byte_tokenizer, save_checkpoint

    costs_curve(steep=True, monkeypatch=monkeypatch)
    folder = save_checkpoint(tiny_model(vocab_size=len(byte_tokenizer()), seed=3), tmp_path / "target")
    argv = ["generate", "--strategy", "lookahead", "--model", str(folder), "--prompt", "hi", "--max-new-tokens", "4"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main([*argv, "--color", "never"]) == 0
    out = capsys.readouterr().out
    assert "\n[lookahead] warning: Lookahead: decodes greedily: its best setting" in out
    assert not [w for w in caught if issubclass(w.category, mtdecode.GreedyFallbackWarning)]
