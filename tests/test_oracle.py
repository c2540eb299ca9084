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

from mtdecode.beams import choose
from mtdecode.strategies import Autoregressive, Jacobi, Lookahead, PromptLookup, Speculative
from mtdecode.testing import (
    assert_conforms,
    check_beam_sampler,
    check_greedy,
    check_rejection_sampler,
    check_sampling,
    check_seeds,
    check_tree_sampler,
    decoders,
    kernels,
    mutants,
    strategy_decoder,
)
from mtdecode.testing.blackbox import SAMPLING_SETTINGS, greedy_model, sampling_model

from conftest import types_unchecked

pytestmark = pytest.mark.usefixtures("one_thread")

CHECKS = {
    "check_greedy": check_greedy,
    "check_sampling": check_sampling,
    "check_rejection_sampler": check_rejection_sampler,
    "check_beam_sampler": check_beam_sampler,
    "check_seeds": check_seeds,
    "check_tree_sampler": check_tree_sampler,
}
#: mutants whose check ends inconclusive rather than failed: their law is right, but their guessing path never runs
INCONCLUSIVE = {mutants.never_guesses_when_sampling}


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


@pytest.mark.parametrize("name", ["speculative", "jacobi", "prompt_lookup", "lookahead"])
def test_our_exact_strategies_conform(name):
    """At 6 Hypothesis examples per model and 5,000 sampled runs per setting (the defaults, 25 and 20,000, run in
    `benchmarks/oracle_time.py`): still every length mark crossed, and a law at total variation 0.08 or more from
    the exact one caught with probability 0.99. The sampled runs go with the type checks off: each strategy's sampled
    path runs with them on in `tests/test_batch.py`."""
    decoder = ours(name)
    greedy = check_greedy(decoder, examples=6)
    with types_unchecked():
        sampling = check_sampling(decoder, samples=5_000)
    assert_conforms(greedy, sampling)
    assert sampling.figures["detectable_tv"] < 0.08
    assert greedy.figures["marks_crossed"] == [16, 32, 64, 128, 256] and greedy.figures["longest_total"] > 256
    for report in (greedy, sampling):  # what the check saw: forwards that verified guesses
        assert report.figures["coverage"]["verifications"] > 0, report.summary
        assert "verified more than one token" in report.summary
    assert greedy.figures["coverage"]["calls_ahead"] > 0  # and calls that committed more tokens than forwards


def test_a_decoder_that_never_guesses_is_inconclusive_unless_checked_as_plain():
    """Plain greedy decoding gives the right tokens, but no guess was ever verified: not called conforming."""
    decoder = ours("autoregressive")
    greedy = check_greedy(decoder, examples=5)
    assert greedy.verdict == "inconclusive" and not greedy.passed and "never verified a guess" in greedy.summary
    assert greedy.figures["coverage"]["verifications"] == 0
    with pytest.raises(AssertionError, match="INCONCLUSIVE"):
        assert_conforms(greedy)
    assert check_greedy(decoder, examples=5, require_guesses=False).verdict == "conforms"


def test_check_greedy_covers_long_prompts_a_window_an_eos_a_large_vocabulary_and_ties():
    from mtdecode.testing import GREEDY_MODELS

    models = {label: greedy_model(label) for label in GREEDY_MODELS}
    assert models["llama-32k"].config.vocab_size >= 32_000
    assert models["mistral-window"].config.sliding_window == 8
    assert models["llama-eos"].generation_config.eos_token_id is not None
    lm_head = models["llama-ties"].get_output_embeddings().weight
    assert lm_head[0::2].equal(lm_head[1::2])
    weights = [m.get_output_embeddings().weight[:16, :8] for m in models.values()]  # really different weights
    assert all(not a.equal(b) for i, a in enumerate(weights) for b in weights[i + 1 :])


def test_check_seeds_passes_seeded_decoders_across_processes():
    report = check_seeds(mutants.homework_speculative)
    assert report.passed and "In a new process every seed gave the same tokens again" in report.summary, report
    assert report.figures["false_alarm"] < 1e-4
    batched = check_seeds(ours("prompt_lookup"))  # not importable by name: one process only, and it says so
    assert batched.passed and "not checked (the decoder cannot be imported by name)" in batched.summary


@pytest.mark.parametrize(
    "fn", [kernels.ours, mutants.homework_rejection_sampler, kernels.transformers_rejection_sampler]
)
def test_correct_rejection_samplers_conform(fn):
    """Ours at the defaults (10,000 trials per source); the two that take one trial per call at 5,000 (the
    conformance command runs transformers' at the defaults)."""
    report = check_rejection_sampler(fn, trials=10_000 if fn is kernels.ours else 5_000)
    assert_conforms(report)
    assert report.figures["detectable_tv"] < 0.1


def test_mtads_beam_draw_conforms():
    assert_conforms(check_beam_sampler(choose))


def test_a_correct_third_party_speculative_decoder_conforms():
    """The catalogue's baseline, written directly against transformers (one call per prompt, no batches), with
    2,500 sampled runs per setting (it is slow): a law at total variation 0.1 or more is caught with probability
    0.99. The sampled runs go with the type checks off (about a quarter of their time; the greedy check below runs
    the same decoder with them on, and the samplers' and our strategies' checks above run `check_sampling` so)."""
    with types_unchecked():
        report = check_sampling(mutants.homework_speculative, samples=2_500)
    assert_conforms(check_greedy(mutants.homework_speculative, examples=6), report)
    assert report.figures["detectable_tv"] < 0.1


def test_the_catalogue_holds_at_least_25_classes_with_the_public_ones():
    assert len(mutants.CATALOGUE) >= 25
    named = " ".join(m.__doc__ or "" for m in mutants.CATALOGUE)
    for report in ("transformers#47932", "vllm#7627", "vllm-ascend#2881", "vllm#43150", "mlxcel#1214"):
        assert report in named, report


# a mutant is a correct decoder or sampler with one bug switched on (`mutants.homework_speculative`'s `bug`, ...): the
# correct ones run with their types checked in the conformance tests above, and checking them again in every mutant
# took about 30% of these tests' time (79 s of test time checked, 55 s unchecked)
@pytest.mark.usefixtures("unchecked")
@pytest.mark.parametrize("mutant", list(mutants.CATALOGUE), ids=lambda m: m.__name__)
def test_every_mutant_fails_its_check(mutant):
    """At the check's defaults, or for the slow ones at the smaller settings `mutants.NEEDS` gives."""
    report = CHECKS[mutants.CATALOGUE[mutant]](mutant, **mutants.NEEDS.get(mutant, {}))
    assert not report.passed, f"{mutant.__name__} was not caught: {report.summary}"
    if mutant in INCONCLUSIVE:
        assert report.verdict == "inconclusive", report.summary
        return
    assert report.verdict == "fails" and "FAILED" in report.summary, report.summary
    if report.check == "check_greedy" and "expected" in report.figures:  # a counterexample comes with its code
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
    """2,500 runs (a decoder that does not take batches is slow) under temperature 0.7 with top-k 5, the setting of
    transformers#47932's bug class (a q that was not sampled from under a warper): a law at total variation 0.1 or
    more from the exact one is still caught with probability 0.99. All three settings at the defaults run in
    `python -m mtdecode.testing.conformance`."""
    _, top_k, _ = SAMPLING_SETTINGS
    report = check_sampling(decoders.hf_assisted_decoder(), samples=2_500, settings=(top_k,))
    assert_conforms(report)
    assert report.figures["detectable_tv"] < 0.1


def test_transformers_prompt_lookup_is_exactly_greedy():
    assert_conforms(check_greedy(decoders.hf_prompt_lookup_decoder()))


# ---- the shell and pytest


DECODERS = """
from mtdecode.testing import greedy_tokens
from mtdecode.strategies import PromptLookup
from mtdecode.testing import strategy_decoder

good = strategy_decoder(PromptLookup(2, 3))


def plain(model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed):
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
    options = ("--examples", "4", "--samples", "1500", "--max-prompt", "40")
    code, out, _ = mtdecode_check("my_decoders:good", *options, "--json", str(out_json), capsys=capsys)
    assert code == 0 and "my_decoders:good: conforms (greedy conforms, sampling conforms, seeds conforms)" in out
    reports = json.loads(out_json.read_text())
    assert [r["check"] for r in reports] == ["check_greedy", "check_sampling", "check_seeds"]
    assert reports[1]["figures"]["samples"] == 1500 and "X²=" in reports[1]["summary"] and "p=" in out
    assert all(r["figures"]["coverage"]["verifications"] > 0 for r in reports)


def test_mtdecode_check_exits_1_with_the_summary_for_a_wrong_decoder(decoder_module, capsys):
    code, out, _ = mtdecode_check("my_decoders:off_by_one", "--checks", "greedy", capsys=capsys)
    assert code == 1 and "check_greedy FAILED" in out and "does NOT conform" in out
    code, out, _ = mtdecode_check("my_decoders:floats", "--checks", "greedy", capsys=capsys)
    assert code == 1 and "expected a list of token ids" in out


def test_mtdecode_check_exits_3_with_the_traceback_for_a_decoder_that_crashes(decoder_module, capsys):
    code, out, _ = mtdecode_check("my_decoders:crashes", "--checks", "greedy", capsys=capsys)
    assert code == 3 and "check_greedy CRASHED" in out and 'raise RuntimeError("out of cheese")' in out, out


def test_mtdecode_check_exits_4_for_a_decoder_that_never_guesses_and_0_with_plain(decoder_module, capsys):
    options = ("--checks", "greedy", "--families", "llama", "--examples", "3")
    code, out, _ = mtdecode_check("my_decoders:plain", *options, capsys=capsys)
    assert code == 4 and "INCONCLUSIVE" in out and "my_decoders:plain: inconclusive" in out
    code, out, _ = mtdecode_check("my_decoders:plain", *options, "--plain", capsys=capsys)
    assert code == 0


def test_mtdecode_check_imports_from_the_current_folder_and_leaves_no_hypothesis_folder(
    decoder_module, capsys, monkeypatch
):
    """Run as a user would, from the decoder's own folder, with nothing on PYTHONPATH; a file path works too."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    options = ["--checks", "greedy", "--families", "llama", "--examples", "1"]
    run = subprocess.run(
        [sys.executable, "-m", "mtdecode", "check", "my_decoders:off_by_one", *options],
        cwd=decoder_module, capture_output=True, text=True, env=env,
    )  # fmt: skip
    assert run.returncode == 1 and "check_greedy FAILED" in run.stdout, run.stdout + run.stderr
    assert not (decoder_module / ".hypothesis").exists()
    monkeypatch.chdir(decoder_module)  # the file-path form, in this process
    code, out, _ = mtdecode_check("my_decoders.py:off_by_one", *options, capsys=capsys)
    assert code == 1 and "check_greedy FAILED" in out, out
    assert not (decoder_module / ".hypothesis").exists()


def test_mtdecode_check_runs_a_decoder_in_another_interpreter(decoder_module, capsys, monkeypatch):
    """--python: the decoder runs in a subprocess of the given interpreter (here this one), and is judged the same."""
    monkeypatch.chdir(decoder_module)
    options = ("--checks", "greedy", "--families", "llama", "--examples", "1", "--python", sys.executable)
    code, out, _ = mtdecode_check("my_decoders:off_by_one", *options, capsys=capsys)
    assert code == 1 and "check_greedy FAILED" in out and f"(in {sys.executable})" in out, out


def test_mtdecode_check_in_bfloat16_passes_a_correct_decoder_and_fails_a_real_bug_showing_the_margins(capsys):
    """Exact up to ties: the correct homework decoder passes in bfloat16; the one whose cache keeps a rejected guess
    fails, and its report gives the position, both tokens and greedy's logit gap against the calibrated ε."""
    options = ("--dtype", "bfloat16", "--checks", "greedy", "--families", "llama", "qwen2")
    code, out, _ = mtdecode_check("mtdecode.testing.mutants:homework_speculative", *options, capsys=capsys)
    assert code == 0 and "exact up to ties (tier 2)" in out and "ε = " in out, out
    code, out, _ = mtdecode_check("mtdecode.testing.mutants:cache_rollback_off_by_one", *options, capsys=capsys)
    assert code == 1 and "check_greedy FAILED (exact up to ties, bfloat16)" in out, out
    assert "greedy's logit gap between them" in out and "top-2 margin" in out and ": bug" in out


def test_check_greedy_takes_a_model_of_your_own_in_your_dtype():
    """A model the oracle did not build (another family, vocabulary and dtype) and a wrong dtype refused."""
    import torch

    from mtdecode.testing import tiny_model

    model = tiny_model("qwen2", vocab_size=40, seed=5, dtype=torch.float16)
    report = check_greedy(ours("prompt_lookup"), model=model, examples=6)
    assert report.passed and report.figures["vocab"] == [40] and report.figures["dtype"] == "float16", str(report)
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
        ("my_decoders", "expected package.module:function"),
        ("--families llama nope -- my_decoders:good", "unknown --families nope"),
    ],
)
def test_mtdecode_check_exits_2_with_one_line_for_a_bad_target(decoder_module, capsys, target, message):
    code, out, err = mtdecode_check(*target.split(), capsys=capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


PLUGIN_TESTS = """
from my_decoders import good, off_by_one


def test_good(decoding_oracle):
    decoding_oracle.assert_conforms(good, examples=2)


def test_wrong(decoding_oracle):
    decoding_oracle.assert_conforms(off_by_one, examples=1)


def test_every_family(tiny_model):
    assert len(off_by_one(tiny_model, [1, 2], max_new_tokens=3, temperature=0.0, top_k=None, top_p=None, seed=0)) <= 3
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
    assert "1 failed, 7 passed" in run.stdout, run.stdout + run.stderr
    assert "check_greedy FAILED (bit-exact, float64): off_by_one" in run.stdout


def test_the_tiny_models_are_the_checks_own():
    assert greedy_model("llama").config.vocab_size == 16 and sampling_model().config.vocab_size == 8
