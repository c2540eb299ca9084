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

import contextlib
import functools
import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from mtdecode.generate import generate
from mtdecode.model import CausalLM
from mtdecode.sampling import Sampler
from mtdecode.strategies.autoregressive import Autoregressive
from mtdecode.testing.coverage import Coverage, watching
from mtdecode.testing.decoders import DecoderError, eos_of, run_batch
from mtdecode.testing.distribution import block_cells, exact_joint
from mtdecode.testing.models import tiny_model
from mtdecode.testing.report import Report
from mtdecode.testing.stats import chi_square_test, detectable_tv
from mtdecode.testing.ties import (
    BIT_EXACT,
    Difference,
    calibrate,
    greedy_differences,
    other_implementation_bound,
    tier,
)


@dataclass(frozen=True)
class GreedyModel:
    """One tiny random float64 model of `check_greedy`, and what it is there to catch."""

    label: str
    family: str
    vocab: int
    seed: int
    why: str
    #: the end-of-sequence token its generation config names (None: none)
    eos: int | None = None
    #: output rows in identical pairs (2i + 1 copies 2i): every step has an exact tie, which greedy breaks to the
    #: lowest id
    tied_pairs: bool = False
    hidden: int = 32
    config: tuple = ()


#: the models of `check_greedy`, by label; a vocabulary of 16 makes greedy text repeat, so guesses pay
GREEDY_MODELS = {
    m.label: m
    for m in (
        GreedyModel("llama", "llama", 16, 3, "a small vocabulary: greedy text repeats, so copies and guesses pay"),
        GreedyModel("qwen2", "qwen2", 16, 11, "other weights, other sizes, attention biases", hidden=48),
        GreedyModel(
            "mistral-window", "mistral", 16, 5, "a sliding window of 8 positions, crossed by every long prompt",
            config=(("sliding_window", 8),),
        ),
        GreedyModel("llama-32k", "llama", 32_768, 7, "a vocabulary of 32,768"),
        GreedyModel("llama-eos", "llama", 16, 3, "an end-of-sequence token that greedy text reaches mid-way", eos=13),
        GreedyModel(
            "llama-ties", "llama", 16, 13, "exact ties at every step, broken to the lowest id", tied_pairs=True
        ),
    )
}
GREEDY_FAMILIES = tuple(GREEDY_MODELS)
#: totals (prompt + new tokens) that the generated cases cross: cache pages, buffers and windows break there
LENGTH_MARKS = (16, 32, 64, 128, 256)
GREEDY_VOCAB = 16  # the small vocabulary of most of them
#: the model, prompt and settings of `check_sampling`; the prompt's repeated n-grams give
#: prompt-lookup and lookahead decoders candidates from the first step on
SAMPLING_VOCAB = 8
SAMPLING_PROMPT = (1, 2, 3, 1, 2, 4, 1)
#: the inputs `check_sampling` may choose among, in order (prompt, block length): the prompt above with 2 and 3
#: tokens, then a prompt of one motif repeated, whose continuation a copying decoder can copy
SAMPLING_INPUTS = (
    (SAMPLING_PROMPT, 2),
    (SAMPLING_PROMPT, 3),
    ((1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2), 3),
)
#: how wrong (total variation, on the runs that take it) a guessed path may be and still escape the check's
#: stated power: a passing check "conforms" only if the guessed path ran in a share of runs that detects this
GUESSED_PATH_ERROR = 0.5
SAMPLING_SETTINGS = (
    Sampler(temperature=1.0),
    Sampler(temperature=0.7, top_k=5),
    Sampler(temperature=1.2, top_p=0.8),
)


def greedy_model(label: str, dtype: torch.dtype = torch.float64, device: str | torch.device = "cpu"):
    """The tiny model `check_greedy` uses under `label` (a key of `GREEDY_MODELS`; float64 on the CPU unless
    another dtype or device is asked for)."""
    if label not in GREEDY_MODELS:
        raise ValueError(f"unknown model {label!r}; the check's models are {', '.join(GREEDY_MODELS)}")
    return _greedy_model(label, dtype, str(torch.device(device)))


@functools.cache
def _greedy_model(label: str, dtype: torch.dtype, device: str):
    spec = GREEDY_MODELS[label]
    model = tiny_model(
        spec.family, vocab_size=spec.vocab, seed=spec.seed, dtype=dtype, device=device, hidden=spec.hidden,
        **dict(spec.config),
    )
    if spec.tied_pairs:
        with torch.no_grad():
            rows = model.get_output_embeddings().weight  # (vocab, hidden)
            rows[1::2] = rows[0::2]
    if spec.eos is not None:  # its output row scaled up, so greedy text reaches EOS after 6 tokens on average
        with torch.no_grad():
            model.get_output_embeddings().weight[spec.eos] *= 1.5
        model.config.eos_token_id = model.generation_config.eos_token_id = spec.eos
    return model


@functools.cache
def sampling_model():
    """The tiny float64 model `check_sampling` uses."""
    return tiny_model("llama", vocab_size=SAMPLING_VOCAB, seed=1, layers=1, hidden=16)


def reference_greedy(model, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> list[list[int]]:
    """Greedy decoding of every prompt, each to its budget or just after the model's EOS: mtdecode's
    `Autoregressive` (itself tested against transformers' `generate` on every family). In half precision a
    batch rounds as a batch, not as each prompt alone, so there each prompt is decoded alone."""
    adapter = CausalLM.wrap(model)
    if len(prompts) > 1 and adapter.dtype not in BIT_EXACT:
        return [reference_greedy(model, [prompt], max_new_tokens)[0] for prompt in prompts]
    eos = adapter.hf.generation_config.eos_token_id
    rows = [list(p) for p in prompts]
    result = generate(
        model, rows, Autoregressive(), max_new_tokens=max_new_tokens, seed=0, eos_token_id=eos,
        pad_token_id=0 if eos is not None else None,
    )
    return [result.row(b) for b in range(len(prompts))]


class _Counterexample(Exception):
    """Raised inside the Hypothesis run when the decoder disagrees with greedy decoding."""


#: how many cases Hypothesis may try after the first counterexample to find a smaller one
SHRINK_CALLS = 40


def check_greedy(
    decoder: Callable,
    *,
    families: Sequence[str] = GREEDY_FAMILIES,
    examples: int | None = None,
    max_prompt: int = 300,
    max_new_tokens: int = 16,
    batch: int = 8,
    dtype: torch.dtype | str | None = None,
    model=None,
    device: str | torch.device = "cpu",
    require_guesses: bool = True,
) -> Report:
    """Greedy parity of `decoder`, with Hypothesis-generated prompts and budgets: token for token in float64 and
    float32, up to ties in bfloat16 and float16 (`mtdecode.testing.ties`).

    **Arguments:**

    - `decoder`: a `Decoder` (see `mtdecode.testing.decoders`).
    - `families`: which of the check's tiny models to test on (keys of `GREEDY_MODELS`: small and 32k
      vocabularies, a sliding window, an EOS reached mid-way, exact ties; default all).
    - `examples`: Hypothesis examples per model (default 25 on the tiny models, 8 on a model of your own); each
      is one prompt, or up to `batch` prompts for a decoder that takes batches.
    - `max_prompt`, `max_new_tokens`: the largest prompt and budget generated; prompts are short, long, or end
      just before a total of 16, 32, 64, 128 or 256 tokens that the budget crosses.
    - `dtype`: the tiny models' dtype (default float64), or the dtype your `model` must have.
    - `model`: your own causal LM (a transformers model, a `CausalLM`, or a local folder) instead of the tiny
      ones; prompts are then random or repeating tokens of its vocabulary.
    - `device`: where the tiny models (or the folder's model) go; a model object stays where it is.
    - `require_guesses`: a decoder that never verified a guess (see `mtdecode.testing.coverage`) gets the
      verdict "inconclusive"; pass False to check a plain greedy decoder.

    **Returns:**

    A `Report` with its verdict and coverage; on failure its `reproducer` is Python code that shows the smallest
    counterexample found.
    """
    name = describe(decoder)
    models = _greedy_models(families, dtype, model, device)
    examples = examples if examples is not None else (25 if model is None else 8)
    max_prompt = min(max_prompt, min(m.max_length for _, m in models) - max_new_tokens)
    cases, identical, flips, longest, crossed = 0, 0, [], 0, set()
    record = Coverage()
    for label, adapter in models:
        bound = _tie_bound(decoder, adapter)
        warm_up(decoder, adapter.hf, [1, 2, 3, 1, 2], 4)
        found, tried = _search_greedy(decoder, adapter, examples, max_prompt, max_new_tokens, batch, bound, record)
        cases += tried["prompts"]
        identical += tried["identical"]
        flips += tried["flips"]
        longest, crossed = max(longest, tried["longest"]), crossed | tried["crossed"]
        if found:
            return _greedy_failure(decoder, name, label, adapter, found, record)
    dtypes = sorted({str(adapter.dtype).removeprefix("torch.") for _, adapter in models})
    level = _tier(decoder, models[0][1].dtype)
    where = (
        f"tiny {'/'.join(dtypes)} models ({', '.join(label for label, _ in models)})"
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
        "vocab": [m.vocab_size for _, m in models],
        "longest_total": longest,
        "marks_crossed": sorted(crossed),
        "coverage": record.to_json(),
    }
    if level == "bit-exact":
        why = (
            "Greedy decoding is deterministic and this precision keeps rounding far from any tie, so any difference "
            "would be a bug (tier 1, bit-exact)."
        )
    else:
        bound = _tie_bound(decoder, models[-1][1])
        figures["epsilon"] = bound.epsilon
        ties = (
            f"all {cases} outputs are identical to greedy decoding's"
            if identical == cases
            else f"{identical} of {cases} outputs are identical to greedy decoding's; the other {cases - identical} "
            f"differ only at near-ties ({len(flips)} tokens, largest gap {max(d.gap for d in flips):.3g})"
            if flips
            else f"{identical} of {cases} outputs are identical to greedy decoding's"
        )
        own = " and its own copy of the model" if _own_copy(decoder) else ""
        why = f"In {dtypes[0]}{own} that means exact up to ties (tier 2): {ties}, with {bound}."
    scope = (
        f"on all {cases} prompts ({examples} Hypothesis examples per model) of {where}, prompts of 1 to {max_prompt} "
        f"tokens, budgets of 1 to {max_new_tokens}, totals up to {longest} tokens; the runs crossed the lengths "
        f"{', '.join(map(str, sorted(crossed))) or 'none'} (of the {', '.join(map(str, LENGTH_MARKS))} they aim at). "
        f"{record}."
    )
    if require_guesses and not record.guessed:
        summary = (
            f"check_greedy INCONCLUSIVE: {name} gave greedy decoding's tokens {scope} But it never verified a guess "
            "(no forward after a prefill took more than one new token, and no call committed more tokens than it "
            "made forwards), so its speculative path never ran: nothing about it was tested. Give it prompts or "
            "settings that engage it, or pass require_guesses=False to check a plain decoder."
        )
        return Report("check_greedy", False, summary, figures, verdict="inconclusive")
    summary = f"check_greedy passed: {name} gave greedy decoding's tokens {scope} " + why
    return Report("check_greedy", True, summary, figures)


def _ends_where_it_should(tokens: list[int], budget: int, eos: int | list[int] | None) -> bool:
    """Whether a greedy output ends as the contract says, on its own text: at the budget, or right after its first
    end-of-sequence token."""
    ends = set() if eos is None else {eos} if isinstance(eos, int) else set(eos)
    first_end = next((i for i, t in enumerate(tokens) if t in ends), None)
    return len(tokens) == first_end + 1 if first_end is not None else len(tokens) == budget


def _own_copy(decoder) -> bool:
    """Whether `decoder` runs its own copy of the model (an engine's kernels): it then declares `runs_own_copy`."""
    return getattr(decoder, "runs_own_copy", False)


def _tier(decoder, dtype: torch.dtype) -> str:
    """The exactness tier `decoder` is held to in `dtype` (`mtdecode.testing.ties`)."""
    return "exact up to ties" if _own_copy(decoder) else tier(dtype)


def _tie_bound(decoder, model: CausalLM):
    """The ε a difference from greedy is judged against (None: tier 1, none is allowed)."""
    if _own_copy(decoder):
        return other_implementation_bound(model)
    return calibrate(model) if model.dtype not in BIT_EXACT else None


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


def cases(data, vocab: int, max_prompt: int, max_new_tokens: int, rows: int) -> tuple[list[list[int]], int]:
    """Draw one case from Hypothesis' `data`: up to `rows` prompts and a budget.

    A prompt is short (1 to 10 tokens), long (up to `max_prompt`), or ends just before one of `LENGTH_MARKS` so
    that prompt + budget crosses it; its tokens are random, or a short motif repeated with a few changes, which
    gives copying and lookahead decoders guesses to verify.
    """
    from hypothesis import strategies as st

    budget = data.draw(st.integers(1, max_new_tokens), label="budget")
    marks = [m for m in LENGTH_MARKS if m - budget < max_prompt]
    prompts = []
    for _ in range(data.draw(st.integers(1, rows), label="rows")):
        kind = data.draw(st.sampled_from(("short", "crossing", "long") if marks else ("short", "long")))
        if kind == "short":
            length = data.draw(st.integers(1, min(10, max_prompt)))
        elif kind == "crossing":  # prompt < mark <= prompt + budget
            mark = data.draw(st.sampled_from(marks))
            length = data.draw(st.integers(max(1, mark - budget), min(mark - 1, max_prompt)))
        else:
            length = data.draw(st.integers(1, max_prompt))
        token = st.integers(0, vocab - 1)
        if data.draw(st.booleans(), label="repeats"):
            motif = data.draw(st.lists(token, min_size=1, max_size=6))
            prompt = (motif * length)[:length]
            for place, value in data.draw(st.lists(st.tuples(st.integers(0, length - 1), token), max_size=3)):
                prompt[place] = value
        else:
            prompt = data.draw(st.lists(token, min_size=length, max_size=length))
        prompts.append(prompt)
    return prompts, budget


def _search_greedy(decoder, model, examples: int, max_prompt: int, max_new_tokens: int, batch: int, bound, record):
    """Run Hypothesis on one model; return the smallest counterexample found ({} if none) and what was tried:
    prompts, identical outputs, and the near-ties allowed (tier 2 only; `bound` is its `TieBound`). The decoder's
    forwards are counted in `record` (a `Coverage`)."""
    from hypothesis import HealthCheck, Phase, Verbosity, given, settings
    from hypothesis import strategies as st

    batched = getattr(decoder, "takes_batches", False)
    found: dict = {}
    tried = {"prompts": 0, "identical": 0, "flips": [], "longest": 0, "crossed": set()}

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
    @given(data=st.data())
    def case(data):
        prompts, budget = cases(data, model.vocab_size, max_prompt, max_new_tokens, batch if batched else 1)
        if found:
            tried["shrinks"] = tried.get("shrinks", 0) + 1
            if tried["shrinks"] > SHRINK_CALLS:  # shrunk enough: `found` keeps the smallest real counterexample
                raise _Counterexample
        judge(prompts, budget)

    def judge(prompts: list[list[int]], budget: int) -> None:
        """Decode `prompts` with the decoder and with greedy decoding; raise `_Counterexample` at a difference."""
        tried["prompts"] += len(prompts)
        expected = reference_greedy(model, prompts, budget)
        try:
            with watching(model.hf, record):
                got = run_batch(decoder, model.hf, prompts, max_new_tokens=budget, seeds=[0] * len(prompts))
        except DecoderError as error:
            found.update(prompt=prompts[0], budget=budget, error=str(error), differences=[])
            found.update(crashed=error.crashed, traceback=error.traceback)
            raise _Counterexample from error
        for prompt, ours, theirs in zip(prompts, expected, got, strict=True):
            tried["longest"] = max(tried["longest"], len(prompt) + len(ours))
            tried["crossed"].update(m for m in LENGTH_MARKS if len(prompt) < m <= len(prompt) + len(ours))
            if ours == theirs:
                tried["identical"] += 1
                continue
            epsilon = bound.epsilon if bound is not None else None
            # tier 2: a near-tie may lead the decoder to other text, which may reach EOS elsewhere, so its tokens
            # are read on its own text and its length judged by its own text's end
            differences = greedy_differences(model, prompt, theirs, epsilon=epsilon)
            wrong_length = not _ends_where_it_should(theirs, budget, eos_of(model.hf))
            if bound is None or wrong_length or not all(d.near_tie for d in differences):
                found.update(prompt=prompt, budget=budget, expected=ours, got=theirs, error=None, crashed=False)
                found["differences"] = differences
                raise _Counterexample
            tried["flips"] += differences

    # then one prompt ending just before each length mark, so every mark is crossed whatever Hypothesis drew
    # (a repeated motif: copying decoders get something to copy)
    crossing_budget = min(max_new_tokens, 4)
    lengths = [mark - 2 for mark in LENGTH_MARKS if 1 <= mark - 2 <= max_prompt]
    crossing = [[(3, 1, 4, 1, 5, 9)[i % 6] % model.vocab_size for i in range(n)] for n in lengths]
    with _hypothesis_home():
        try:
            case()  # the last failing call Hypothesis makes is the smallest counterexample: `found` holds it
            for prompts in [crossing] if batched else [[prompt] for prompt in crossing]:
                try:
                    judge(prompts, crossing_budget)
                except _Counterexample:
                    found["shrunk"] = False  # found here, past Hypothesis: not shrunk
                    raise
        except _Counterexample:
            pass
        except Exception as error:  # something else broke inside the search: report it with the case that caused it
            if not found:
                raise
            found["error"] = f"{type(error).__name__}: {error}"
    return found, tried


@contextlib.contextmanager
def _hypothesis_home():
    """Hypothesis keeps its files in a temporary folder, not in a `.hypothesis/` of the user's current folder."""
    import tempfile

    from hypothesis import configuration

    previous = getattr(configuration, "__hypothesis_home_directory", None)  # None: the default, or the env's
    with tempfile.TemporaryDirectory(prefix="mtdecode-hypothesis-") as folder:
        configuration.set_hypothesis_home_dir(folder)
        try:
            yield
        finally:
            configuration.set_hypothesis_home_dir(previous)


def _greedy_failure(decoder, name: str, label: str, model: CausalLM, found: dict, record: Coverage) -> Report:
    prompt, budget = found["prompt"], found["budget"]
    dtype = str(model.dtype).removeprefix("torch.")
    level = _tier(decoder, model.dtype)
    if found.get("crashed"):
        summary = (
            f"check_greedy CRASHED: {name} raised on the {label} model for the prompt {prompt} (the smallest "
            f"Hypothesis found, {len(prompt)} tokens) with max_new_tokens={budget}: {found['error']}.\n\n"
            f"{found['traceback']}"
        )
        figures = {"model": label, "prompt": prompt, "max_new_tokens": budget, "error": found["error"]}
        return Report("check_greedy", False, summary, figures | {"traceback": found["traceback"]}, verdict="crashed")
    if found["error"] is not None:
        what = found["error"]
    else:
        got, expected = found["got"], found["expected"]
        index = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), None)
        index = min(len(got), len(expected)) if index is None else index
        what = f"it gave {got}, greedy decoding gives {expected} (first difference at index {index})"
        eos = model.hf.generation_config.eos_token_id
        if len(got) > len(expected) and eos is not None and expected and expected[-1] == eos:
            what += f"; it went on after the end-of-sequence token {eos}"
        elif len(got) != len(expected):
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
    why = GREEDY_MODELS[label].why if label in GREEDY_MODELS else "your model"
    summary = (
        f"check_greedy FAILED ({level}, {dtype}): {name} differs from greedy decoding on the {label} model ({why}). "
        f"For the prompt {prompt} ({len(prompt)} tokens) with max_new_tokens={budget}, {what}. "
        + (
            "Hypothesis shrank this to the smallest case it found"
            if found.get("shrunk", True)
            else "One of the prompts that end just before a length mark found this (it is not shrunk)"
        )
        + f"; the reproducer below shows it. {record}."
    )
    figures = {"model": label, "dtype": dtype, "tier": level, "prompt": prompt, "max_new_tokens": budget, **found}
    figures["coverage"] = record.to_json()
    reproducer = greedy_reproducer(decoder, label if label in GREEDY_MODELS else None, prompt, budget, dtype)
    return Report("check_greedy", False, summary, figures, reproducer=reproducer)


def greedy_reproducer(decoder, label: str | None, prompt: list[int], budget: int, dtype: str = "float64") -> str:
    """Python code that shows a greedy counterexample when pasted (`label` None: the user's own model)."""
    line = importable(decoder)
    if label is None:
        model = "model = ...  # your model, as you passed it to check_greedy"
    else:
        model = f'model = greedy_model("{label}", dtype=torch.{dtype})  # CPU'
    return "\n".join(
        [
            "# reproducer found by mtdecode.testing.check_greedy",
            "import torch",
            "from mtdecode.testing.blackbox import greedy_model, reference_greedy",
            "from mtdecode.testing.ties import calibrate, greedy_differences",
            line,
            model,
            f"prompt = {list(prompt)}",
            f"expected = reference_greedy(model, [prompt], {budget})[0]",
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
    tokens: int | None = None,
    false_alarm: float = 1e-3,
    settings: Sequence[Sampler] = SAMPLING_SETTINGS,
    batch: int = 5_000,
    require_guesses: bool = True,
) -> Report:
    """The law of `decoder`'s first `tokens` tokens against exact enumeration, under each Sampler setting.

    For each setting the decoder continues a prompt on a tiny float64 model (vocabulary 8) `samples`
    times with seeds 0, 1, ...; the counts of its blocks are compared with the exact law of
    token-by-token sampling (`exact_joint`) by a chi-square test at `false_alarm / len(settings)`,
    so a correct decoder fails the whole check with probability at most `false_alarm`. The check
    stops at the first setting that fails.

    **Power on the guessed path.** A test of the whole law says little about a speculative path that
    runs in few of the runs: if a share s of the runs take it, an error confined to those runs (at
    total variation d from the exact law on them, leaving how often they happen unchanged) moves the
    whole law by only s x d (a run takes the guessed path if its call verified a guess, see
    `mtdecode.testing.coverage`). The check detects a total variation of ε (its stated power), so it detects a
    guessed path that is `GUESSED_PATH_ERROR` wrong only if s >= ε / `GUESSED_PATH_ERROR`. A passing
    decoder whose share falls short gets the verdict "inconclusive", with both figures. To reach the
    share, the check first probes the inputs of `SAMPLING_INPUTS` (the prompt, then longer blocks,
    then a prompt that repeats, which copying decoders copy from) and keeps the first that reaches it,
    or the one that guessed most.

    **Arguments:**

    - `samples`: runs per setting; default 20,000 for a decoder that takes batches, else 5,000 (also for one
      behind the `--python` bridge whose own decoder does not take batches).
    - `tokens`: how many first tokens make a block (V^tokens cells); by default the probe chooses 2 or 3 (most
      decoders guess nothing for the last token of a budget, so a copy or Jacobi path needs a third token to run
      at all). 3 also suits bugs that show only after two accepted guesses (8 times the cells: give it more
      samples).
    - `false_alarm`: the probability that a correct decoder fails.
    - `settings`: the Samplers to test (default: plain temperature, top-k, top-p).
    - `require_guesses`: a decoder whose guessed path ran too rarely gets the verdict "inconclusive"; pass False
      to check a plain sampler.

    **Returns:**

    A `Report` whose figures give each setting's statistic, p-value and detectable total variation, the
    guessed path's share of runs and the share it needed, and the coverage (`mtdecode.testing.coverage`).
    """
    batched = getattr(decoder, "takes_batches", False)
    one_at_a_time = not batched or getattr(decoder, "decodes_one_at_a_time", False)  # e.g. behind the bridge
    samples = samples or (5_000 if one_at_a_time else 20_000)
    model = sampling_model()
    name = describe(decoder)
    alpha = false_alarm / len(settings)
    probe = min(batch, samples) if batched else 32  # a decoder may size its speculation by the batch
    if require_guesses:
        prompt, tokens = _engaging_input(decoder, model, tokens, probe, samples, alpha)
    else:  # a plain sampler: nothing to engage
        prompt, tokens = SAMPLING_PROMPT, tokens or 2
    results, failed = [], []
    record = Coverage()
    for sampler in settings:
        counts = torch.zeros(SAMPLING_VOCAB**tokens, dtype=torch.long)
        for start in range(0, samples, batch if batched else samples):
            rows = min(batch, samples - start) if batched else samples
            knobs = dict(temperature=sampler.temperature, top_k=sampler.top_k, top_p=sampler.top_p)
            try:
                with watching(model, record):
                    outputs = run_batch(
                        decoder, model, [list(prompt)] * rows, max_new_tokens=tokens, seeds=range(start, start + rows),
                        **knobs,
                    )
            except DecoderError as error:
                return _sampling_broken(name, sampler, error)
            short = [o for o in outputs if len(o) < tokens]
            if short:
                return _sampling_broken(name, sampler, DecoderError(f"it returned {short[0]} for {tokens} tokens"))
            counts += torch.bincount(
                block_cells(torch.tensor(outputs), SAMPLING_VOCAB), minlength=SAMPLING_VOCAB**tokens
            )
        fit = chi_square_test(counts, exact_joint(model, prompt, tokens, sampler), false_alarm=alpha)
        epsilon = detectable_tv(samples, fit.dof, alpha)
        results.append({"setting": _setting(sampler), **vars(fit), "passed": fit.passed, "detectable_tv": epsilon})
        if not fit.passed:
            failed.append((sampler, fit))
            break  # one failing setting settles the verdict; the others would only cost time
    power = max(r["detectable_tv"] for r in results)
    needed = min(1.0, power / GUESSED_PATH_ERROR)
    figures = {
        "samples": samples,
        "tokens": tokens,
        "prompt": list(prompt),
        "false_alarm": false_alarm,
        "detectable_tv": power,
        "settings": results,
        "guessing_share": record.guessing_share,
        "guessing_share_needed": needed,
        "coverage": record.to_json(),
    }
    names = ", ".join(_setting(s) for s in settings)
    where = (
        f"the first {tokens} tokens after the {len(prompt)}-token prompt {list(prompt)} on a tiny float64 Llama "
        f"(vocabulary {SAMPLING_VOCAB}, {SAMPLING_VOCAB**tokens} blocks), {samples} seeded runs under each of: {names}"
    )
    fits = "; ".join(
        f"{r['setting']}: X²={r['statistic']:.1f} on {r['dof']} dof, p={r['p_value']:.3g}" for r in results
    )
    strength = (
        f"{fits}. A correct decoder fails this check with probability at most {false_alarm:g} (a chi-square test at "
        f"{alpha:.2g} per setting); a law at total-variation distance {power:.3f} or more from the exact one "
        f"(on the test's cells) is detected with probability 0.99. The guessed path ran in {record.rows_guessing} "
        f"of {record.rows} runs ({record.guessing_share:.1%}); detecting a guessed path that is "
        f"{GUESSED_PATH_ERROR:g} wrong (in total variation, on the runs that take it) needs {needed:.1%}. {record}."
    )
    if failed:
        sampler, fit = failed[0]
        summary = (
            f"check_sampling FAILED: {name} does not sample {where} with the law of token-by-token sampling: under "
            f"{_setting(sampler)}, {fit}. " + strength
        )
        return Report("check_sampling", False, summary, figures)
    if require_guesses and record.guessing_share < needed:
        never = "it never verified a guess" if not record.guessed else "its guessed path ran too rarely"
        summary = (
            f"check_sampling INCONCLUSIVE: {name} sampled {where} with the right law, but {never} while sampling "
            f"(in {record.guessing_share:.1%} of runs, of the {needed:.1%} the check's power needs), so its "
            "speculative sampling path was not tested with the stated power. " + strength
        )
        return Report("check_sampling", False, summary, figures, verdict="inconclusive")
    summary = f"check_sampling passed: {name} samples {where} with the exact law of token-by-token sampling. "
    return Report("check_sampling", True, summary + strength, figures)


def warm_up(decoder: Callable, model, prompt: list[int], tokens: int, **knobs) -> None:
    """One call that coverage does not watch: a decoder may try the model out on first use (mtdecode's strategies
    check once that it takes their masks and positions; tuned ones time forwards of several widths), and those
    forwards are not guesses. Errors are left to the check, which reports them."""
    knobs = knobs or dict(temperature=0.0, top_k=None, top_p=None)
    with contextlib.suppress(DecoderError):
        run_batch(decoder, model, [prompt], max_new_tokens=tokens, seeds=[0], **knobs)


def _engaging_input(
    decoder: Callable, model, tokens: int | None, runs: int, samples: int, alpha: float
) -> tuple[tuple[int, ...], int]:
    """The (prompt, block length) of `SAMPLING_INPUTS` that `check_sampling` uses: the first whose probe of `runs`
    seeded runs (temperature 1) ran the guessed path in the share the check's power needs, else the one that ran it
    most. Forced to `tokens` if given. A decoder that crashes here is left to the check itself, which reports it."""
    choices = [(p, t) for p, t in SAMPLING_INPUTS if tokens in (None, t)] or [(SAMPLING_PROMPT, tokens)]
    best, best_share = choices[0], -1.0
    for prompt, length in choices:
        needed = detectable_tv(samples, SAMPLING_VOCAB**length - 1, alpha) / GUESSED_PATH_ERROR
        record = Coverage()
        knobs = dict(temperature=1.0, top_k=None, top_p=None)
        try:
            warm_up(decoder, model, list(prompt), length, **knobs)
            with watching(model, record):
                run_batch(decoder, model, [list(prompt)] * runs, max_new_tokens=length, seeds=range(runs), **knobs)
        except DecoderError:
            return prompt, length
        if record.guessing_share >= needed:
            return prompt, length
        if record.guessing_share > best_share:
            best, best_share = (prompt, length), record.guessing_share
    return best


def _sampling_broken(name: str, sampler: Sampler, error: DecoderError) -> Report:
    figures = {"setting": _setting(sampler), "error": str(error)}
    if error.crashed:
        summary = f"check_sampling CRASHED: {name} raised under {_setting(sampler)}: {error}.\n\n{error.traceback}"
        return Report("check_sampling", False, summary, figures | {"traceback": error.traceback}, verdict="crashed")
    summary = f"check_sampling FAILED: {name} broke the decoder contract under {_setting(sampler)}: {error}."
    return Report("check_sampling", False, summary, figures)


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
    """A line that binds `decoder` in a fresh interpreter: an import if it can be imported by name, or the code a
    decoder made by a function gives as its `binding`."""
    if getattr(decoder, "binding", None):
        return decoder.binding
    module, qualname = getattr(decoder, "__module__", None), getattr(decoder, "__qualname__", "")
    if module and qualname and "<" not in qualname and "." not in qualname:
        try:
            if getattr(importlib.import_module(module), qualname) is decoder:
                return f"from {module} import {qualname} as decoder"
        except (ImportError, AttributeError):
            pass
    return "decoder = ...  # your decoder: it cannot be imported by name"
