"""The oracle for black-box decoders: `check_greedy` and `check_sampling`.

Both take any decoder of the `mtdecode.testing.decoders.Decoder` protocol (a function of the
model, the prompt and the sampling settings that returns the new tokens) and return a
`Report`; `assert_conforms(report)` fails a test with its summary.

- `check_greedy`: at temperature 0 the decoder must give exactly the tokens of greedy
  decoding, on tiny float64 Llama, Qwen2 and Mistral models (or in another dtype, or on the
  user's own model), for prompts and budgets that Hypothesis generates. In float64 and float32
  that means token for token; in bfloat16 and float16 it means up to ties: every token that
  differs from greedy's argmax must lie within the calibrated bound ε of it
  (`mtdecode.testing.ties`). A failure is shrunk to the smallest counterexample Hypothesis
  finds, shows the logit gap at the difference against ε, and comes with a ready-to-paste
  reproducer.
- `check_sampling`: with sampling, the law of the first tokens must be the law of
  token-by-token sampling, computed exactly by enumeration on a tiny vocabulary, under plain
  temperature, top-k and top-p. Chi-square tests with a stated false-alarm rate; the report
  states the power as the smallest total-variation error detected with probability 0.99.

Neither check may be called from inside a Hypothesis test (`check_greedy` runs Hypothesis itself).
"""

import functools
import importlib
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from mtdecode.generate import generate
from mtdecode.model import CausalLM
from mtdecode.sampling import Sampler
from mtdecode.strategies.autoregressive import Autoregressive
from mtdecode.testing.decoders import DecoderError, run_batch
from mtdecode.testing.distribution import block_cells, exact_joint
from mtdecode.testing.models import tiny_model
from mtdecode.testing.report import Report
from mtdecode.testing.stats import chi_square_test, detectable_tv
from mtdecode.testing.ties import BIT_EXACT, Difference, calibrate, greedy_differences, tier

#: the models of `check_greedy`: tiny, random, float64; a vocabulary of 16 makes greedy text repeat
GREEDY_FAMILIES = ("llama", "qwen2", "mistral")
GREEDY_VOCAB = 16
#: the model, prompt and settings of `check_sampling`; the prompt's repeated n-grams give
#: prompt-lookup and lookahead decoders candidates from the first step on
SAMPLING_VOCAB = 8
SAMPLING_PROMPT = (1, 2, 3, 1, 2, 4, 1)
SAMPLING_SETTINGS = (
    Sampler(temperature=1.0),
    Sampler(temperature=0.7, top_k=5),
    Sampler(temperature=1.2, top_p=0.8),
)


def greedy_model(family: str, dtype: torch.dtype = torch.float64, device: str | torch.device = "cpu"):
    """The tiny model `check_greedy` uses for `family` (float64 on the CPU unless another dtype or device is asked
    for)."""
    return _greedy_model(family, dtype, str(torch.device(device)))


@functools.cache
def _greedy_model(family: str, dtype: torch.dtype, device: str):
    return tiny_model(family, vocab_size=GREEDY_VOCAB, seed=3, dtype=dtype, device=device)


@functools.cache
def sampling_model():
    """The tiny float64 model `check_sampling` uses."""
    return tiny_model("llama", vocab_size=SAMPLING_VOCAB, seed=1, layers=1, hidden=16)


def reference_greedy(model, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
    """Greedy decoding of every prompt: mtdecode's `Autoregressive` (itself tested against transformers' `generate`)."""
    result = generate(model, [list(p) for p in prompts], Autoregressive(), max_new_tokens=max_new_tokens, seed=0)
    return [result.row(b) for b in range(len(prompts))]


class _Counterexample(Exception):
    """Raised inside the Hypothesis run when the decoder disagrees with greedy decoding."""


def check_greedy(
    decoder: Callable,
    *,
    families: Sequence[str] = GREEDY_FAMILIES,
    examples: int | None = None,
    max_prompt: int = 10,
    max_new_tokens: int = 16,
    batch: int = 8,
    dtype: torch.dtype | str | None = None,
    model=None,
    device: str | torch.device = "cpu",
) -> Report:
    """Greedy parity of `decoder`, with Hypothesis-generated prompts and budgets: token for token in float64 and
    float32, up to ties in bfloat16 and float16 (`mtdecode.testing.ties`).

    **Arguments:**

    - `decoder`: a `Decoder` (see `mtdecode.testing.decoders`).
    - `families`: the model families to test on (tiny random transformers models).
    - `examples`: Hypothesis examples per model (default 50 on the tiny models, 8 on a model of your own); each
      is one prompt, or up to `batch` prompts for a decoder that takes batches.
    - `max_prompt`, `max_new_tokens`: the largest prompt and budget generated.
    - `dtype`: the tiny models' dtype (default float64), or the dtype your `model` must have.
    - `model`: your own causal LM (a transformers model, a `CausalLM`, or a local folder) instead of the tiny
      ones; prompts are then random tokens of its vocabulary.
    - `device`: where the tiny models (or the folder's model) go; a model object stays where it is.

    **Returns:**

    A `Report`; on failure its `reproducer` is Python code that shows the smallest counterexample found.
    """
    name = describe(decoder)
    models = _greedy_models(families, dtype, model, device)
    examples = examples if examples is not None else (50 if model is None else 8)
    cases, identical, flips = 0, 0, []
    for label, adapter in models:
        bound = calibrate(adapter) if adapter.dtype not in BIT_EXACT else None
        found, tried = _search_greedy(decoder, adapter, examples, max_prompt, max_new_tokens, batch, bound)
        cases += tried["prompts"]
        identical += tried["identical"]
        flips += tried["flips"]
        if found:
            return _greedy_failure(decoder, name, label, adapter, found)
    dtypes = sorted({str(adapter.dtype).removeprefix("torch.") for _, adapter in models})
    level = tier(models[0][1].dtype)
    where = (
        f"tiny {'/'.join(dtypes)} {', '.join(label for label, _ in models)} models (vocabulary {GREEDY_VOCAB})"
        if model is None
        else f"{models[0][0]} ({'/'.join(dtypes)}, vocabulary {models[0][1].vocab_size})"
    )
    figures = {
        "models": [label for label, _ in models],
        "dtype": dtypes[0],
        "tier": level,
        "examples_per_model": examples,
        "prompts": cases,
        "identical": identical,
        "near_ties": [vars(d) for d in flips],
        "vocab": models[0][1].vocab_size,
    }
    if level == "bit-exact":
        why = (
            "Greedy decoding is deterministic and this precision keeps rounding far from any tie, so any difference "
            "would be a bug (tier 1, bit-exact)."
        )
    else:
        bound = calibrate(models[-1][1])
        figures["epsilon"] = bound.epsilon
        ties = (
            f"all {cases} outputs are identical to greedy decoding's"
            if identical == cases
            else f"{identical} of {cases} outputs are identical to greedy decoding's; the other {cases - identical} "
            f"differ only at near-ties ({len(flips)} tokens, largest gap {max(d.gap for d in flips):.3g})"
            if flips
            else f"{identical} of {cases} outputs are identical to greedy decoding's"
        )
        why = f"In {dtypes[0]} that means exact up to ties (tier 2): {ties}, with {bound}."
    summary = (
        f"check_greedy passed: {name} gave greedy decoding's tokens on all {cases} prompts ({examples} Hypothesis "
        f"examples per model) of {where}, prompts of 1 to {max_prompt} tokens, budgets of 1 to {max_new_tokens}. "
        + why
    )
    return Report("check_greedy", True, summary, figures)


def _greedy_models(families: Sequence[str], dtype, model, device) -> list[tuple[str, CausalLM]]:
    """(label, model) for each model `check_greedy` runs on."""
    dtype = _as_dtype(dtype)
    if model is None:
        return [(family, CausalLM.wrap(greedy_model(family, dtype or torch.float64, device))) for family in families]
    if isinstance(model, str | Path):
        from mtdecode.zoo import load_model

        return [(str(model), load_model(str(model), dtype=dtype or torch.float32, device=device))]
    adapter = CausalLM.wrap(model)
    if dtype is not None and adapter.dtype != dtype:
        raise ValueError(f"the model is {adapter.dtype} but dtype={dtype} was asked for; convert it, or leave dtype")
    return [(type(adapter.hf).__name__, adapter)]


def _as_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    value = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(value, torch.dtype) or not value.is_floating_point:
        raise ValueError(f"unknown floating-point dtype {dtype!r}; try float64, float32, bfloat16 or float16")
    return value


def _search_greedy(decoder, model, examples: int, max_prompt: int, max_new_tokens: int, batch: int, bound):
    """Run Hypothesis on one model; return the smallest counterexample found ({} if none) and what was tried:
    prompts, identical outputs, and the near-ties allowed (tier 2 only; `bound` is its `TieBound`)."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import strategies as st

    batched = getattr(decoder, "takes_batches", False)
    vocab = model.vocab_size
    found: dict = {}
    tried = {"prompts": 0, "identical": 0, "flips": []}

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.explicit, Phase.generate, Phase.shrink),
        verbosity=Verbosity.quiet,
        print_blob=False,
        report_multiple_bugs=False,
    )
    @given(
        prompts=st.lists(
            st.lists(st.integers(0, vocab - 1), min_size=1, max_size=max_prompt),
            min_size=1,
            max_size=batch if batched else 1,
        ),
        budget=st.integers(1, max_new_tokens),
    )
    def case(prompts, budget):
        tried["prompts"] += len(prompts)
        expected = reference_greedy(model, prompts, budget)
        try:
            got = run_batch(decoder, model.hf, prompts, max_new_tokens=budget, seeds=[0] * len(prompts))
        except DecoderError as error:
            found.update(prompt=prompts[0], budget=budget, error=str(error), differences=[])
            raise _Counterexample from error
        for prompt, ours, theirs in zip(prompts, expected, got, strict=True):
            if ours != theirs and len(prompts) > 1:  # in half precision a batched reference rounds as a batch does
                ours = reference_greedy(model, [prompt], budget)[0]
            if ours == theirs:
                tried["identical"] += 1
                continue
            epsilon = bound.epsilon if bound is not None else None
            differences = greedy_differences(model, prompt, theirs[:budget], epsilon=epsilon)
            wrong_length = len(theirs) != len(ours)
            if bound is None or wrong_length or not all(d.near_tie for d in differences):
                found.update(prompt=prompt, budget=budget, expected=ours, got=theirs, error=None)
                found["differences"] = differences
                raise _Counterexample
            tried["flips"] += differences

    try:
        case()  # the last failing call Hypothesis makes is the smallest counterexample: `found` holds it
    except _Counterexample:
        pass
    except Exception as error:  # something else broke inside the search: report it with the case that caused it
        if not found:
            raise
        found["error"] = f"{type(error).__name__}: {error}"
    return found, tried


def _greedy_failure(decoder, name: str, label: str, model: CausalLM, found: dict) -> Report:
    prompt, budget = found["prompt"], found["budget"]
    dtype = str(model.dtype).removeprefix("torch.")
    level = tier(model.dtype)
    if found["error"] is not None:
        what = found["error"]
    else:
        got, expected = found["got"], found["expected"]
        index = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), None)
        index = min(len(got), len(expected)) if index is None else index
        what = f"it gave {got}, greedy decoding gives {expected} (first difference at index {index})"
        if len(got) != len(expected):
            what += f"; it returned {len(got)} tokens for max_new_tokens={budget}"
        differences = found["differences"]
        if differences and differences[0].epsilon is None:  # tier 1: measure ε only to show how far off it is
            epsilon = calibrate(model).epsilon
            differences = [Difference(**{**vars(d), "epsilon": epsilon}) for d in differences]
        beyond = [d for d in differences if not d.near_tie]  # not explained by rounding, in any tier
        if differences:
            what += ". " + differences[0].describe(allowed=level != "bit-exact")
            if beyond and beyond[0] is not differences[0]:
                what += "; then " + beyond[0].describe(allowed=level != "bit-exact")
        found = {**found, "differences": [vars(d) for d in differences]}
    summary = (
        f"check_greedy FAILED ({level}, {dtype}): {name} differs from greedy decoding on the {label} model. "
        f"For the prompt {prompt} with max_new_tokens={budget}, {what}. Hypothesis shrank this to the smallest "
        "case it found; the reproducer below shows it."
    )
    figures = {"model": label, "dtype": dtype, "tier": level, "prompt": prompt, "max_new_tokens": budget, **found}
    reproducer = greedy_reproducer(decoder, label if label in GREEDY_FAMILIES else None, prompt, budget, dtype)
    return Report("check_greedy", False, summary, figures, reproducer=reproducer)


def greedy_reproducer(decoder, family: str | None, prompt: list[int], budget: int, dtype: str = "float64") -> str:
    """Python code that shows a greedy counterexample when pasted (`family` None: the user's own model)."""
    line = importable(decoder)
    if family is None:
        model = "model = ...  # your model, as you passed it to check_greedy"
    else:
        model = f'model = tiny_model("{family}", vocab_size={GREEDY_VOCAB}, seed=3, dtype=torch.{dtype})  # CPU'
    return "\n".join(
        [
            "# reproducer found by mtdecode.testing.check_greedy",
            "import torch",
            "from mtdecode.testing import greedy_tokens, tiny_model",
            "from mtdecode.testing.ties import calibrate, greedy_differences",
            line,
            model,
            f"prompt = {list(prompt)}",
            f"expected = greedy_tokens(model, prompt, {budget})",
            f"got = decoder(model, prompt, max_new_tokens={budget}, temperature=0.0, top_k=None, top_p=None, seed=0)",
            "for difference in greedy_differences(model, prompt, got, epsilon=calibrate(model).epsilon):",
            "    print(difference.describe())",
            'assert got == expected, f"{got} != {expected}"',
        ]
    )


def check_sampling(
    decoder: Callable,
    *,
    samples: int | None = None,
    tokens: int = 2,
    false_alarm: float = 1e-3,
    settings: Sequence[Sampler] = SAMPLING_SETTINGS,
    batch: int = 5_000,
) -> Report:
    """The law of `decoder`'s first `tokens` tokens against exact enumeration, under each Sampler setting.

    For each setting the decoder continues `SAMPLING_PROMPT` on a tiny float64 model (vocabulary 8)
    `samples` times with seeds 0, 1, ...; the counts of its blocks are compared with the exact law
    of token-by-token sampling (`exact_joint`) by a chi-square test at `false_alarm / len(settings)`,
    so a correct decoder fails the whole check with probability at most `false_alarm`. The check
    stops at the first setting that fails.

    **Arguments:**

    - `samples`: runs per setting; default 20,000 for a decoder that takes batches, else 5,000.
    - `tokens`: how many first tokens make a block (V^tokens cells).
    - `false_alarm`: the probability that a correct decoder fails.
    - `settings`: the Samplers to test (default: plain temperature, top-k, top-p).

    **Returns:**

    A `Report` whose figures give each setting's statistic, p-value and detectable total variation.
    """
    batched = getattr(decoder, "takes_batches", False)
    samples = samples or (20_000 if batched else 5_000)
    model = sampling_model()
    name = describe(decoder)
    alpha = false_alarm / len(settings)
    results, failed = [], []
    for sampler in settings:
        counts = torch.zeros(SAMPLING_VOCAB**tokens, dtype=torch.long)
        for start in range(0, samples, batch if batched else samples):
            rows = min(batch, samples - start) if batched else samples
            prompts = [list(SAMPLING_PROMPT)] * rows
            knobs = dict(temperature=sampler.temperature, top_k=sampler.top_k, top_p=sampler.top_p)
            try:
                outputs = run_batch(
                    decoder, model, prompts, max_new_tokens=tokens, seeds=range(start, start + rows), **knobs
                )
            except DecoderError as error:
                return _sampling_broken(name, sampler, error)
            short = [o for o in outputs if len(o) < tokens]
            if short:
                return _sampling_broken(name, sampler, DecoderError(f"it returned {short[0]} for {tokens} tokens"))
            counts += torch.bincount(
                block_cells(torch.tensor([o[:tokens] for o in outputs]), SAMPLING_VOCAB),
                minlength=SAMPLING_VOCAB**tokens,
            )
        fit = chi_square_test(counts, exact_joint(model, SAMPLING_PROMPT, tokens, sampler), false_alarm=alpha)
        epsilon = detectable_tv(samples, fit.dof, alpha)
        results.append({"setting": _setting(sampler), **vars(fit), "passed": fit.passed, "detectable_tv": epsilon})
        if not fit.passed:
            failed.append((sampler, fit))
            break  # one failing setting settles the verdict; the others would only cost time
    power = max(r["detectable_tv"] for r in results)
    figures = {
        "samples": samples,
        "tokens": tokens,
        "false_alarm": false_alarm,
        "detectable_tv": power,
        "settings": results,
    }
    names = ", ".join(_setting(s) for s in settings)
    where = (
        f"the first {tokens} tokens after a {len(SAMPLING_PROMPT)}-token prompt on a tiny float64 Llama "
        f"(vocabulary {SAMPLING_VOCAB}, {SAMPLING_VOCAB**tokens} blocks), {samples} seeded runs under each of: {names}"
    )
    strength = (
        f"A correct decoder fails this check with probability at most {false_alarm:g} (a chi-square test at "
        f"{alpha:.2g} per setting); a law at total-variation distance {power:.3f} or more from the exact one "
        "(on the test's cells) is detected with probability 0.99."
    )
    if not failed:
        summary = f"check_sampling passed: {name} samples {where} with the exact law of token-by-token sampling. "
        return Report("check_sampling", True, summary + strength, figures)
    sampler, fit = failed[0]
    summary = (
        f"check_sampling FAILED: {name} does not sample {where} with the law of token-by-token sampling: under "
        f"{_setting(sampler)}, {fit}. " + strength
    )
    return Report("check_sampling", False, summary, figures)


def _sampling_broken(name: str, sampler: Sampler, error: Exception) -> Report:
    summary = f"check_sampling FAILED: {name} broke the decoder contract under {_setting(sampler)}: {error}."
    return Report("check_sampling", False, summary, {"setting": _setting(sampler), "error": str(error)})


def _setting(sampler: Sampler) -> str:
    parts = [f"temperature {sampler.temperature:g}"]
    if sampler.top_k is not None:
        parts.append(f"top-k {sampler.top_k}")
    if sampler.top_p is not None:
        parts.append(f"top-p {sampler.top_p:g}")
    return " with ".join(parts)


def describe(decoder: Callable) -> str:
    """A readable name for a decoder."""
    return getattr(decoder, "__qualname__", None) or getattr(decoder, "__name__", None) or repr(decoder)


def importable(decoder: Callable) -> str:
    """A line that binds `decoder` in a fresh interpreter: an import if it can be imported by name."""
    module, qualname = getattr(decoder, "__module__", None), getattr(decoder, "__qualname__", "")
    if module and qualname and "<" not in qualname and "." not in qualname:
        try:
            if getattr(importlib.import_module(module), qualname) is decoder:
                return f"from {module} import {qualname} as decoder"
        except (ImportError, AttributeError):
            pass
    return "decoder = ...  # your decoder: it cannot be imported by name"
