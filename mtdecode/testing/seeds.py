"""`check_seeds`: a seed must repeat a sampled run, in the same process and in a fresh one, and different
seeds must give different runs.

A sampler that draws from an unseeded stream (Python's `random`, a global torch generator it never
seeds, timing) can still pass a law check: each draw has the right law, only not the one the seed
names. So this check calls the decoder several times with each seed, at temperature 1 on the
`check_sampling` model and prompt, and compares the tokens exactly. If the decoder can be imported by
name (or runs in another interpreter already), it also decodes the same seeds in a new process.
"""

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence

from mtdecode.sampling import Sampler
from mtdecode.testing.blackbox import SAMPLING_PROMPT, SAMPLING_VOCAB, describe, importable, sampling_model
from mtdecode.testing.coverage import Coverage, watching
from mtdecode.testing.decoders import DecoderError, run_batch
from mtdecode.testing.distribution import exact_joint
from mtdecode.testing.report import Report

#: the script a fresh interpreter runs: decode each seed once and print the tokens as JSON
_FRESH = """
import json, sys
{line}
from mtdecode.testing.blackbox import SAMPLING_PROMPT, sampling_model
from mtdecode.testing.decoders import run_batch
seeds, tokens = json.loads(sys.argv[1]), int(sys.argv[2])
model = sampling_model()
print(json.dumps([run_batch(decoder, model, [list(SAMPLING_PROMPT)], max_new_tokens=tokens, temperature=1.0,
                            seeds=[seed])[0] for seed in seeds]))
"""


def check_seeds(
    decoder: Callable,
    *,
    seeds: Sequence[int] = tuple(range(8)),
    repeats: int = 3,
    tokens: int = 12,
    fresh_process: bool = True,
) -> Report:
    """Whether `decoder`'s seeds repeat its sampled runs (see the module docstring).

    **Arguments:**

    - `seeds`: the seeds tried; each is decoded `repeats` times in this process.
    - `tokens`: new tokens per run (temperature 1, no truncation).
    - `fresh_process`: also decode every seed once in a new interpreter, when the decoder can be imported by name
      (or has a `restarted()` method that gives the same decoder in a new process, as a bridged decoder does).

    **Returns:** a `Report`. The runs of different seeds must not all be the same: for a correct decoder that
    happens with probability at most the bound stated in the summary (computed exactly from the model's law of
    the first two tokens), the check's false-alarm rate.
    """
    name = describe(decoder)
    model = sampling_model()
    record = Coverage()

    def run(seed: int) -> list[int]:
        with watching(model, record):
            return run_batch(
                decoder, model, [list(SAMPLING_PROMPT)], max_new_tokens=tokens, temperature=1.0, seeds=[seed]
            )[0]

    try:
        runs = {seed: [run(seed) for _ in range(repeats)] for seed in seeds}
    except DecoderError as error:
        verdict = "crashed" if error.crashed else "fails"
        summary = f"check_seeds {verdict.upper()}: {name}: {error}.\n\n{error.traceback}".rstrip()
        figures = {"error": str(error), "traceback": error.traceback}
        return Report("check_seeds", False, summary, figures, verdict=verdict)
    figures = {"seeds": list(seeds), "repeats": repeats, "tokens": tokens, "runs": runs, "coverage": record.to_json()}
    coincide = _coincidence_bound(len(seeds))
    figures["false_alarm"] = coincide
    unrepeated = {seed: outs for seed, outs in runs.items() if any(o != outs[0] for o in outs)}
    if unrepeated:
        seed, outs = next(iter(unrepeated.items()))
        distinct = len({tuple(o) for o in outs})
        summary = (
            f"check_seeds FAILED: {name} does not repeat a seeded run: seed {seed} gave {distinct} different outputs "
            f"in {repeats} calls in one process ({outs[0]} then {next(o for o in outs if o != outs[0])}); "
            f"{len(unrepeated)} of {len(seeds)} seeds did not repeat. Something draws from a stream the seed does "
            "not set (Python's random, an unseeded generator, timing)."
        )
        return Report("check_seeds", False, summary, figures)
    firsts = [outs[0] for outs in runs.values()]
    if all(o == firsts[0] for o in firsts):
        summary = (
            f"check_seeds FAILED: {name} gave the same tokens {firsts[0]} for all of the seeds {list(seeds)}: the seed "
            f"is ignored. A correct decoder does this with probability at most {coincide:.2g}."
        )
        return Report("check_seeds", False, summary, figures)
    fresh = _fresh_runs(decoder, list(seeds), tokens) if fresh_process else None
    if isinstance(fresh, str):
        across = f"In a new process: not checked ({fresh})."
    else:
        figures["fresh_process"] = fresh
        moved = [seed for seed, out in zip(seeds, fresh, strict=True) if out != runs[seed][0]]
        if moved:
            seed = moved[0]
            summary = (
                f"check_seeds FAILED: {name} repeats seeded runs within one process, but not in a new one: seed "
                f"{seed} gave {runs[seed][0]} here and {fresh[list(seeds).index(seed)]} there ({len(moved)} of "
                f"{len(seeds)} seeds differ). Something outside the seed sets its random stream (a measured cost, "
                "state kept between processes, the order of a hash)."
            )
            return Report("check_seeds", False, summary, figures)
        across = "In a new process every seed gave the same tokens again."
    summary = (
        f"check_seeds passed: {name} gave the same {tokens} tokens in each of {repeats} calls with each of the seeds "
        f"{list(seeds)} (temperature 1, the check_sampling model and prompt), and different tokens for different "
        f"seeds. {across} A correct decoder fails the last part with probability at most {coincide:.2g}. {record}."
    )
    return Report("check_seeds", True, summary, figures)


def _coincidence_bound(runs: int) -> float:
    """An upper bound on the chance that `runs` independent samples all give the same output: the chance that their
    first two tokens agree, sum over blocks of P(block)^runs, exact on the check's model."""
    law = exact_joint(sampling_model(), SAMPLING_PROMPT, 2, Sampler(temperature=1.0))
    assert law.numel() == SAMPLING_VOCAB**2
    return float((law**runs).sum())


def _fresh_runs(decoder: Callable, seeds: list[int], tokens: int) -> list[list[int]] | str:
    """Each seed decoded once in a new process, or why that could not be done."""
    restarted = getattr(decoder, "restarted", None)
    if restarted is not None:  # a decoder in another interpreter: start another one
        other = restarted()
        try:
            model = sampling_model()
            return [
                run_batch(other, model, [list(SAMPLING_PROMPT)], max_new_tokens=tokens, temperature=1.0, seeds=[s])[0]
                for s in seeds
            ]
        finally:
            getattr(other, "close", lambda: None)()
    line = importable(decoder)
    if line.startswith("decoder = ..."):
        return "the decoder cannot be imported by name"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), *sys.path])}
    run = subprocess.run(
        [sys.executable, "-c", _FRESH.format(line=line), json.dumps(seeds), str(tokens)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if run.returncode != 0:
        last = run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit code {run.returncode}"
        return f"the new process failed: {last}"
    return json.loads(run.stdout.strip().splitlines()[-1])
