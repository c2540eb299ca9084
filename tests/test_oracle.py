"""The oracle for other implementations (`mtdecode.testing`): every check passes every exact strategy of
ours and the correct third-party-style decoders, fails every mutant of the catalogue at its default
settings, and is reachable from Python, pytest (the plugin's fixtures) and the shell (`mtdecode check`).
transformers' own decoders are checked too: assisted generation (greedy and sampling), prompt lookup
(greedy) and its speculative-sampling function (kernel level)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

from mtdecode.strategies import Autoregressive, Jacobi, Lookahead, PromptLookup, Speculative
from mtdecode.strategies.mtad import choose
from mtdecode.testing import (
    assert_conforms,
    check_beam_sampler,
    check_greedy,
    check_rejection_sampler,
    check_sampling,
    decoders,
    kernels,
    mutants,
    strategy_decoder,
)
from mtdecode.testing.blackbox import SAMPLING_SETTINGS, greedy_model, sampling_model

pytestmark = pytest.mark.usefixtures("one_thread")

CHECKS = {
    "check_greedy": check_greedy,
    "check_sampling": check_sampling,
    "check_rejection_sampler": check_rejection_sampler,
    "check_beam_sampler": check_beam_sampler,
}


def ours(name: str):
    """Our exact strategies as batched decoders; the speculative draft is a noisy copy of the target."""
    if name == "speculative":  # a draft for whichever model the check decodes with
        return strategy_decoder(lambda model: Speculative(decoders.noisy_assistant(model.hf), 2))
    return strategy_decoder(
        {
            "autoregressive": Autoregressive(),
            "jacobi": Jacobi(3),
            "prompt_lookup": PromptLookup(2, 3),
            "lookahead": Lookahead(2, 3, 2, prompt_pool=True),
        }[name]
    )


@pytest.mark.parametrize("name", ["autoregressive", "speculative", "jacobi", "prompt_lookup", "lookahead"])
def test_our_exact_strategies_conform(name):
    decoder = ours(name)
    greedy, sampling = check_greedy(decoder), check_sampling(decoder)
    assert_conforms(greedy, sampling)
    assert sampling.figures["samples"] == 20_000 and sampling.figures["detectable_tv"] < 0.05


@pytest.mark.parametrize(
    "fn", [kernels.ours, mutants.homework_rejection_sampler, kernels.transformers_rejection_sampler]
)
def test_correct_rejection_samplers_conform(fn):
    assert_conforms(check_rejection_sampler(fn))


def test_mtads_beam_draw_conforms():
    assert_conforms(check_beam_sampler(choose))


def test_a_correct_third_party_speculative_decoder_conforms():
    """The catalogue's baseline, written directly against transformers (one call per prompt, no batches), with
    2,500 sampled runs per setting (it is slow): a law at total variation 0.1 or more is caught with probability
    0.99."""
    report = check_sampling(mutants.homework_speculative, samples=2_500)
    assert_conforms(check_greedy(mutants.homework_speculative), report)
    assert report.figures["detectable_tv"] < 0.1


#: the slow sampling mutants run on the one setting whose law the bug changes, with the samples that were measured to
#: catch them (benchmarks/mutant_samples.py); the check's defaults have more samples, and so more power
PLAIN, TOP_K, _ = SAMPLING_SETTINGS  # temperature 1; temperature 0.7 with top-k 5; (top-p)
NEEDS = {
    mutants.draft_temperature_mismatch: {"samples": 2_000, "settings": (TOP_K,)},
    mutants.ratio_of_untempered_probabilities: {"samples": 500, "settings": (TOP_K,)},
    mutants.stop_rule_peeks_at_p: {"samples": 500, "settings": (PLAIN,)},
}


@pytest.mark.parametrize("mutant", list(mutants.CATALOGUE), ids=lambda m: m.__name__)
def test_every_mutant_fails_its_check(mutant):
    """At the check's defaults, or for the slow sampling mutants at the smaller settings of `NEEDS`."""
    report = CHECKS[mutants.CATALOGUE[mutant]](mutant, **NEEDS.get(mutant, {}))
    assert not report.passed, f"{mutant.__name__} was not caught: {report.summary}"
    assert "FAILED" in report.summary
    if report.check == "check_greedy":  # a counterexample comes with code that shows it
        assert "prompt = [" in report.reproducer and "assert got == expected" in report.reproducer


def test_a_greedy_counterexample_is_shrunk_to_a_reproducer_that_fails():
    """The reproducer of a failing decoder, pasted and run, shows the failure."""
    report = check_greedy(mutants.cache_rollback_off_by_one)
    assert not report.passed and "from mtdecode.testing.mutants import cache_rollback_off_by_one" in report.reproducer
    run = subprocess.run([sys.executable, "-c", report.reproducer], capture_output=True, text=True)
    assert run.returncode == 1 and "AssertionError" in run.stderr


def test_assert_conforms_raises_with_the_summary():
    report = check_rejection_sampler(mutants.bonus_dropped)
    with pytest.raises(AssertionError, match="the bonus token is missing"):
        assert_conforms(report)


# ---- transformers' decoders, checked like any other


def test_transformers_assisted_generation_is_exactly_greedy():
    assert_conforms(check_greedy(decoders.hf_assisted_decoder()))


def test_transformers_assisted_generation_samples_the_target_law():
    """2,500 runs per setting (a decoder that does not take batches is slow): a law at total variation 0.1 or more
    from the exact one is still caught with probability 0.99."""
    report = check_sampling(decoders.hf_assisted_decoder(), samples=2_500)
    assert_conforms(report)
    assert report.figures["detectable_tv"] < 0.1


def test_transformers_prompt_lookup_is_exactly_greedy():
    assert_conforms(check_greedy(decoders.hf_prompt_lookup_decoder()))


# ---- the shell and pytest


DECODERS = """
from mtdecode.testing import greedy_tokens


def good(model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed):
    return greedy_tokens(model, prompt, max_new_tokens)


def off_by_one(model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed):
    return greedy_tokens(model, prompt, max_new_tokens + 1)[1:]


def crashes(model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed):
    raise RuntimeError("out of cheese")


def floats(model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed):
    return [0.5] * max_new_tokens


def wrong_signature(model, prompt):
    return []


not_callable = 3
"""


@pytest.fixture
def decoder_module(tmp_path, monkeypatch):
    (tmp_path / "my_decoders.py").write_text(DECODERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def mtdecode_check(*argv, capsys):
    from mtdecode.cli import main

    code = main(["check", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_mtdecode_check_exits_0_for_a_conforming_decoder_and_writes_json(decoder_module, capsys):
    out_json = decoder_module / "report.json"
    code, out, _ = mtdecode_check("my_decoders:good", "--json", str(out_json), capsys=capsys)
    assert code == 0 and "my_decoders:good: conforms" in out
    assert json.loads(out_json.read_text())[0]["check"] == "check_greedy"


def test_mtdecode_check_exits_1_with_the_summary_for_a_wrong_decoder(decoder_module, capsys):
    code, out, _ = mtdecode_check("my_decoders:off_by_one", capsys=capsys)
    assert code == 1 and "check_greedy FAILED" in out and "does NOT conform" in out


def test_mtdecode_check_in_bfloat16_passes_a_correct_decoder_and_fails_a_real_bug_showing_the_margins(capsys):
    """Exact up to ties: the correct homework decoder passes in bfloat16; the one whose cache keeps a rejected guess
    fails, and its report gives the position, both tokens and greedy's logit gap against the calibrated ε."""
    code, out, _ = mtdecode_check("mtdecode.testing.mutants:homework_speculative", "--dtype", "bfloat16", capsys=capsys)
    assert code == 0 and "exact up to ties (tier 2)" in out and "ε = " in out, out
    code, out, _ = mtdecode_check("mtdecode.testing.mutants:cache_rollback_off_by_one", "--dtype", "bfloat16",
                                  capsys=capsys)  # fmt: skip
    assert code == 1 and "check_greedy FAILED (exact up to ties, bfloat16)" in out, out
    assert "greedy's logit gap between them" in out and "top-2 margin" in out and ": bug" in out


def test_check_greedy_takes_a_model_of_your_own_in_your_dtype():
    """A model the oracle did not build (another family, vocabulary and dtype) and a wrong dtype refused."""
    import torch

    from mtdecode.testing import tiny_model

    model = tiny_model("qwen2", vocab_size=40, seed=5, dtype=torch.float16)
    report = check_greedy(ours("prompt_lookup"), model=model, examples=6)
    assert report.passed and report.figures["vocab"] == 40 and report.figures["dtype"] == "float16", str(report)
    assert not check_greedy(mutants.cache_rollback_off_by_one, model=model, examples=20).passed
    with pytest.raises(ValueError, match="the model is torch.float16 but dtype=torch.bfloat16"):
        check_greedy(ours("prompt_lookup"), model=model, dtype="bfloat16")


@pytest.mark.parametrize(
    "target, message",
    [
        ("no_such_module:f", "cannot import 'no_such_module'"),
        ("my_decoders:missing", "has no attribute 'missing'"),
        ("my_decoders:not_callable", "is a int, not a callable decoder"),
        ("my_decoders:wrong_signature", "does not take (model, prompt, *, max_new_tokens"),
        ("my_decoders:crashes", "the decoder raised RuntimeError: out of cheese"),
        ("my_decoders:floats", "expected a list of token ids"),
        ("my_decoders", "expected package.module:function"),
    ],
)
def test_mtdecode_check_exits_2_with_one_line_for_a_bad_target(decoder_module, capsys, target, message):
    code, out, err = mtdecode_check(target, capsys=capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


PLUGIN_TESTS = """
from my_decoders import good, off_by_one


def test_good(decoding_oracle):
    decoding_oracle.assert_conforms(good)


def test_wrong(decoding_oracle):
    decoding_oracle.assert_conforms(off_by_one)


def test_every_family(tiny_model):
    assert len(good(tiny_model, [1, 2], max_new_tokens=3, temperature=0.0, top_k=None, top_p=None, seed=0)) == 3
"""


def test_the_pytest_plugin_gives_another_project_the_oracle(decoder_module):
    """Another project's test suite, run by pytest in its own folder: the fixtures come from the entry point."""
    (decoder_module / "test_theirs.py").write_text(textwrap.dedent(PLUGIN_TESTS))
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_theirs.py"],
        cwd=decoder_module,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(decoder_module)},
    )
    assert "1 failed, 4 passed" in run.stdout, run.stdout + run.stderr
    assert "check_greedy FAILED (bit-exact, float64): off_by_one" in run.stdout


def test_the_tiny_models_are_the_checks_own():
    assert greedy_model("llama").config.vocab_size == 16 and sampling_model().config.vocab_size == 8
