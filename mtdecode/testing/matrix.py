"""The family matrix: every decoder-only family of the installed transformers, decoded by every strategy.

For each family of `mtdecode.testing.families.decoder_only_families()` (transformers' own mappings, no list of
ours) a tiny random float64 model is built with every attention window 4 tokens wide, so that windows change the
output. Then either

- `CausalLM` refuses it before the first token (`UnsupportedModelError`, one line that names the model and what
  is missing), or
- every strategy decodes two prompts of different lengths (3 and 9 tokens, the second longer than the window) as
  one batch, and the longer one alone, and every row must equal greedy decoding by the model's own plain
  forwards: the whole text fed again at every step, no cache, no mask, no positions of ours.

`check_family(family)` returns one `FamilyResult`; `python -m mtdecode.testing.matrix --write docs/families.md`
writes the docs page from the same code (tests/test_families.py runs it inside `make test`).

The strategies run with fixed settings (nothing measured, so every run repeats): speculative decoding with a noisy
copy of the target as its draft, Jacobi, prompt lookup, lookahead with the prompt's n-grams in its pool, MTAD
with the target as its own draft and one beam (so that greedy decoding is what it must give: q = p accepts the
whole block, and a beam of one is greedy), and EAGLE with an untrained head and the copy branch.
"""

import argparse
import functools
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import transformers

from mtdecode.costs import DraftCosts
from mtdecode.generate import generate
from mtdecode.model import CausalLM, UnsupportedModelError
from mtdecode.policy import Adaptive
from mtdecode.strategies import MTAD, Autoregressive, Eagle, Jacobi, Lookahead, PromptLookup, Speculative
from mtdecode.testing.families import decoder_only_families, tiny_family_model
from mtdecode.testing.models import perturbed

#: the two prompts: 3 tokens, and 9 (longer than the 4-token windows); their greedy texts repeat (vocabulary 32)
PROMPTS = ([5, 9, 2], [3, 1, 4, 1, 5, 9, 2, 6, 5])
NEW_TOKENS = 12
VOCAB = 32
WINDOW = 4
#: a made-up cost curve for EAGLE's tree-size rule, so that its trees vary in size and nothing is measured
EAGLE_COSTS = DraftCosts(draft=0.0, target=[1.0, 1.1, 1.05, 1.2, 1.25, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8])


def strategies(model) -> dict[str, Callable[[], object]]:
    """Every strategy of the library, made for `model` with the matrix's fixed settings."""
    from mtdecode.zoo.eagle import EagleHead

    def head() -> EagleHead:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(2)
            weights = model.get_input_embeddings().weight, model.get_output_embeddings().weight
            made = EagleHead(model.config, *weights, torch.arange(model.config.vocab_size))
        return made.to(device=model.device, dtype=model.dtype).eval()

    return {
        "autoregressive": lambda: Autoregressive(),
        "speculative": lambda: Speculative(perturbed(model, 0.3, seed=1), 3),
        "jacobi": lambda: Jacobi(4),
        "prompt_lookup": lambda: PromptLookup(2, 4),
        "lookahead": lambda: Lookahead(3, 3, 3, prompt_pool=True),
        "mtad": lambda: MTAD(model, 3, beam_width=1),
        "eagle": lambda: Eagle(head(), depth=3, width=2, lookup=4, policy=Adaptive(costs=EAGLE_COSTS, depth_cost=0.05)),
    }


@dataclass
class FamilyResult:
    """One row of the matrix.

    - `model_class`: the causal-LM class transformers builds for the family;
    - `refused`: `CausalLM`'s one-line reason, if it refused the model (then nothing was decoded);
    - `cells`: per strategy, `"exact"`, or what went wrong (a mismatch with the first differing row, or the error);
    - `attention`: the attention implementation the model was built with; `dtype`: float64, or float32 where the
      family's own float64 forward fails; `seconds`: the row's time;
    - `half`: the same family in bfloat16 (`check_half`), where it was asked for.
    """

    family: str
    model_class: str = ""
    refused: str | None = None
    cells: dict[str, str] = field(default_factory=dict)
    attention: str = ""
    dtype: str = "float64"
    seconds: float = 0.0
    half: str = ""

    @property
    def exact(self) -> bool:
        return self.refused is None and all(cell == "exact" for cell in self.cells.values())

    @property
    def verdict(self) -> str:
        if self.refused is not None:
            return "refused"
        return "exact" if self.exact else "WRONG"


def plain_greedy(model, prompt: list[int], new_tokens: int) -> list[int]:
    """Greedy decoding by the model's own plain forwards: the whole text again at every step, nothing of ours."""
    text = list(prompt)
    with torch.no_grad():
        for _ in range(new_tokens):
            logits = model(input_ids=torch.tensor([text], device=model.device)).logits[0, -1]
            text.append(int(logits.argmax()))
    return text[len(prompt) :]


def check_family(family: str, *, strategy_names: list[str] | None = None, half: bool = False) -> FamilyResult:
    """Build `family`'s tiny model, and refuse it or decode with every strategy (see the module docstring); with
    `half`, an exact family is checked in bfloat16 too (`check_half`)."""
    start = time.perf_counter()
    model, dtype = _model(family)
    result = FamilyResult(family, type(model).__name__, attention=model.config._attn_implementation, dtype=dtype)
    try:
        adapter = CausalLM.wrap(model)
    except UnsupportedModelError as error:
        result.refused = str(error).splitlines()[0]
        result.seconds = time.perf_counter() - start
        return result
    expected = [plain_greedy(model, prompt, NEW_TOKENS) for prompt in PROMPTS]
    made = strategies(model)
    for name in strategy_names or list(made):
        result.cells[name] = _cell(adapter, made[name], expected)
    if half and result.exact:
        result.half = check_half(family, strategy_names=strategy_names)
    result.seconds = time.perf_counter() - start
    return result


def check_half(family: str, *, dtype: torch.dtype = torch.bfloat16, strategy_names: list[str] | None = None) -> str:
    """The family's tiny model in `dtype`: `"refused: ..."` with the probe's reason, or `"exact up to ties"` if every
    strategy's rows (both prompts as one batch) take the argmax of the model's own plain forwards wherever
    no other token lies within ε of it (the tie bound of `mtdecode.testing.ties`, calibrated on 16 tokens), or the
    first strategy and row that part from greedy beyond ε."""
    from mtdecode.testing.ties import calibrate

    model = tiny_family_model(family, vocab_size=VOCAB, window=WINDOW, dtype=dtype)
    try:
        adapter = CausalLM.wrap(model)
    except UnsupportedModelError as error:
        return "refused: " + str(error).splitlines()[0]
    expected = [plain_greedy(model, prompt, NEW_TOKENS) for prompt in PROMPTS]
    epsilon = functools.cache(lambda: calibrate(adapter, [list(p) for p in PROMPTS], tokens=16, widths=(2, 4, 8)))
    made = strategies(model)
    for name in strategy_names or list(made):
        strategy = made[name]()
        batch = generate(adapter, [list(p) for p in PROMPTS], strategy, max_new_tokens=NEW_TOKENS, seed=0,
                         pad_token_id=0)  # fmt: skip
        for index, got in enumerate([batch.row(0), batch.row(1)]):
            if got == expected[index]:  # every token the plain forwards' argmax: no gap to judge
                continue
            bound = epsilon().epsilon
            beyond = [(i, gap) for i, gap in enumerate(plain_gaps(model, PROMPTS[index], got)) if gap > bound]
            if len(got) != NEW_TOKENS or beyond:
                where = f"{len(got)} tokens" if len(got) != NEW_TOKENS else (
                    f"index {beyond[0][0]}: gap {beyond[0][1]:.3g} to greedy's token, ε = {bound:.3g}")  # fmt: skip
                return f"{name} parts from greedy (batch row {index}, {where})"
    return "exact up to ties"


def plain_gaps(model, prompt: list[int], got: list[int]) -> list[float]:
    """For each of `got`'s tokens, how far its logit trails the argmax of the model's own plain forward over the text
    before it (0 where it is the argmax)."""
    gaps, text = [], list(prompt)
    with torch.no_grad():
        for token in got:
            logits = model(input_ids=torch.tensor([text], device=model.device)).logits[0, -1].double()
            gaps.append(float(logits.max() - logits[token]))
            text.append(token)
    return gaps


def _model(family: str) -> tuple[object, str]:
    """The family's tiny model in float64, or in float32 where transformers' own float64 forward fails (then the
    dtype says why)."""
    model = tiny_family_model(family, vocab_size=VOCAB, window=WINDOW)
    try:
        plain_greedy(model, PROMPTS[0], 1)
        return model, "float64"
    except Exception as error:  # a family whose code mixes float32 into its float64 forward
        reason = f"{type(error).__name__}: {str(error).splitlines()[0][:80]}"
        return tiny_family_model(family, vocab_size=VOCAB, window=WINDOW, dtype=torch.float32), (
            f"float32 (its own float64 forward fails: {reason})"
        )


def _cell(adapter: CausalLM, make: Callable[[], object], expected: list[list[int]]) -> str:
    """ "exact", or the first way in which the strategy's rows differ from `expected`, or the error it raised."""
    try:
        strategy = make()
        batch = generate(adapter, [list(p) for p in PROMPTS], strategy, max_new_tokens=NEW_TOKENS, seed=0,
                         pad_token_id=0)  # fmt: skip
        alone = generate(adapter, list(PROMPTS[1]), strategy, max_new_tokens=NEW_TOKENS, seed=0)
    except Exception as error:  # a crash is a cell's outcome, recorded with where it happened
        where = traceback.extract_tb(error.__traceback__)[-1]
        message = (str(error).splitlines() or [""])[0][:160]
        return f"crashed: {type(error).__name__}: {message} ({where.name}, line {where.lineno})"
    for label, got, want in [
        ("batch row 0", batch.row(0), expected[0]),
        ("batch row 1", batch.row(1), expected[1]),
        ("alone", alone.row(0), expected[1]),
    ]:
        if got != want:
            same = [a == b for a, b in zip(got, want, strict=False)]
            index = same.index(False) if False in same else len(same)
            return f"mismatch ({label}, index {index}: {got[index : index + 3]} for {want[index : index + 3]})"
    return "exact"


def markdown(results: list[FamilyResult]) -> str:
    """The docs page: the summary, then one row per family."""
    names = list(next((r.cells for r in results if r.cells), {}) or strategies_names())
    exact = [r for r in results if r.exact]
    refused = [r for r in results if r.refused is not None]
    wrong = [r for r in results if r.verdict == "WRONG"]
    lines = [
        "# Model families",
        "",
        "Which decoder-only families of transformers mtdecode decodes. Generated by "
        "`python -m mtdecode.testing.matrix --write docs/families.md` from the code `make test` runs "
        "(`tests/test_families.py`); see `mtdecode/testing/matrix.py` for what each cell checks.",
        "",
        f"transformers {transformers.__version__}: {len(results)} decoder-only families (its causal-LM mapping "
        f"minus encoders, encoder-decoders and multimodal models). **{len(exact)} exact** in all "
        f"{len(names)} strategies, alone and batched; **{len(refused)} refused** before decoding, each with its "
        f"reason; {len(wrong)} wrong. In bfloat16, **{sum(r.half == 'exact up to ties' for r in exact)} of the "
        f"{len(exact)} exact families are exact up to ties** in every strategy; "
        f"{sum(r.half.startswith('refused') for r in exact)} of them refused.",
        "",
        *_refusal_groups(refused),
        "",
        "Each exact cell decoded two prompts (3 and 9 tokens, the second longer than the 4-token windows) as a "
        f"batch and the longer one alone, {NEW_TOKENS} greedy tokens each, on a tiny random model (2 layers, hidden "
        "size 32, every sliding, local or chunked window 4 tokens wide), and matched the model's own plain "
        "forwards token for token. MTAD runs with the target as its own draft and one beam, where greedy decoding "
        "is what it must give; EAGLE with an untrained head and the copy branch.",
        "",
        "The bfloat16 column builds the same tiny model in bfloat16 and decodes both prompts as one batch with every "
        "strategy; a cell passes where "
        "every token that is not greedy's lies within the tie bound ε of `mtdecode.testing.ties` (see "
        "[rounding](concepts/rounding.md)).",
        "",
        "| family | model | " + " | ".join(names) + " | bfloat16 | verdict |",
        "|---|---|" + "---|" * len(names) + "---|---|",
    ]
    for r in results:
        model = f"`{r.model_class}`, {r.attention}, {r.dtype}"
        if r.refused is not None:
            reason = r.refused.replace("|", "/")
            lines.append(f"| {r.family} | {model} | " + " | ".join("–" for _ in names) + f" | – | refused: {reason} |")
        else:
            cells = ["✓" if r.cells.get(n) == "exact" else f"✗ {r.cells.get(n, '')}" for n in names]
            half = r.half.replace("|", "/") or "–"
            lines.append(f"| {r.family} | {model} | " + " | ".join(cells) + f" | {half} | {r.verdict.lower()} |")
    return "\n".join(lines) + "\n"


#: how the refusals are grouped on the docs page: a phrase of the reason -> what the group is
REFUSAL_GROUPS = {
    "carry a state": "recurrent, convolutional or linear-attention layers (a state that cannot be rolled back)",
    "indexer": "sparse-attention indexers that pick keys by their own scores",
    "compressed caches": "compressed caches that pool several tokens per entry",
    "does not take": "no `position_ids` or no cache argument in the forward",
    "by column on its own": "an attention window or mask applied by column, found by the probe",
    "ALiBi": "ALiBi built from a 2-D padding mask",
    "failed on the probe": "the model's own forward fails on a batch with padding, a cache and positions",
}


def _refusal_groups(refused: list[FamilyResult]) -> list[str]:
    """One line per group of refusals on the docs page, with its families."""
    lines, placed = ["Refused, by reason:", ""], set()
    for phrase, group in REFUSAL_GROUPS.items():
        members = [r.family for r in refused if phrase in r.refused and r.family not in placed]
        placed.update(members)
        if members:
            lines.append(f"- {group}: {len(members)} ({', '.join(members)})")
    rest = [r.family for r in refused if r.family not in placed]
    if rest:
        lines.append(f"- other reasons: {', '.join(rest)}")
    return lines


def strategies_names() -> list[str]:
    return ["autoregressive", "speculative", "jacobi", "prompt_lookup", "lookahead", "mtad", "eagle"]


def main(argv: list[str] | None = None) -> None:
    """`python -m mtdecode.testing.matrix [--families F ...] [--write FILE]`: run the matrix, print it."""
    parser = argparse.ArgumentParser(description=main.__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=None)
    parser.add_argument("--write", help="write the docs page here")
    args = parser.parse_args(argv)
    results = []
    for family in args.families or decoder_only_families():
        result = check_family(family, half=True)
        results.append(result)
        detail = result.refused or "; ".join(f"{n}: {c}" for n, c in result.cells.items() if c != "exact")
        detail = f"{detail} bfloat16: {result.half}" if result.half else detail
        print(f"{family:28} {result.verdict:8} {result.seconds:5.2f} s  {detail}", flush=True)
    page = markdown(results)
    if args.write:
        with open(args.write, "w") as f:
            f.write(page)
        print(f"written to {args.write}")


if __name__ == "__main__":
    main()
