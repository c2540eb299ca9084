"""The conformance report: the oracle run on every public implementation that can be installed here.

    python -m mtdecode.testing.conformance --write docs/conformance.md [--lade PYTHON]

Each implementation goes through the checks that apply to it at their defaults (greedy, sampling and
seeds for a decoder; the rejection-sampler check for a kernel), and the page lists its version, each
check's verdict and coverage, and what was found. lade runs in its own interpreter (`--lade`, a venv
built as docs/examples/lade.md says) through `mtdecode.testing.bridge`, on the Llama models it patches.
"""

import argparse
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import transformers

from mtdecode.testing import decoders, kernels
from mtdecode.testing.blackbox import check_greedy, check_sampling
from mtdecode.testing.kernels import check_rejection_sampler
from mtdecode.testing.report import Report
from mtdecode.testing.seeds import check_seeds

#: the oracle's Llama models: the ones lade 0.0.2 can decode (it patches LlamaForCausalLM only)
LLAMA_MODELS = ("llama", "llama-32k", "llama-eos", "llama-ties")


@dataclass
class Entry:
    """One implementation and its checks."""

    name: str
    version: str
    what: str
    checks: dict[str, Callable[[], Report]]
    reports: dict[str, Report] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)  # each check's wall time


def hf_early_exit_decoder(layers: int = 1) -> Callable:
    """transformers' self-speculative candidate generator: the first `layers` layers of the model itself draft
    (`generate(assistant_early_exit=...)`, LayerSkip)."""
    return decoders.hf_decoder(assistant_early_exit=layers)


def entries(lade: str | None) -> list[Entry]:
    """The implementations this machine can run."""
    version = f"transformers {transformers.__version__}"
    decoder_checks = lambda d: {  # noqa: E731
        "greedy": lambda: check_greedy(d),
        "sampling": lambda: check_sampling(d),
        "seeds": lambda: check_seeds(d),
    }
    found = [
        Entry(
            "assisted generation", version, "`generate(assistant_model=...)`, a noisy copy of the model drafting 3",
            decoder_checks(decoders.hf_assisted_decoder()),
        ),
        Entry(
            "prompt lookup", version, "`generate(prompt_lookup_num_tokens=3)`",
            decoder_checks(decoders.hf_prompt_lookup_decoder()),
        ),
        Entry(
            "early-exit self-speculation", version, "`generate(assistant_early_exit=1)`: the first layer drafts",
            decoder_checks(hf_early_exit_decoder()),
        ),
        Entry(
            "`_speculative_sampling`", version, "the rejection rule of assisted generation, as a kernel",
            {"rejection sampler": lambda: check_rejection_sampler(kernels.transformers_rejection_sampler)},
        ),
    ]
    if lade:
        from mtdecode.testing.bridge import remote_decoder

        folder = str(Path(__file__).resolve().parents[2] / "docs" / "examples")
        remote = remote_decoder(lade, "lade_decoder:decoder", cwd=folder)
        versions = remote.start()
        found.append(
            Entry(
                "lade", f"lade 0.0.2, transformers {versions.get('transformers', '?')}",
                "lookahead decoding's package (LEVEL 3, WINDOW 4, GUESS_SET 4) in its own venv, through the bridge, "
                "on the Llama models it patches",
                {
                    "greedy": lambda: check_greedy(remote, families=LLAMA_MODELS),
                    "sampling": lambda: check_sampling(remote),
                    "seeds": lambda: check_seeds(remote),
                },
            )
        )
    return found


def run(entry: Entry) -> Entry:
    """Run every check of `entry`, printing each summary."""
    for name, check in entry.checks.items():
        print(f"== {entry.name}: {name}", flush=True)
        start = time.perf_counter()
        entry.reports[name] = check()
        entry.seconds[name] = time.perf_counter() - start
        print(entry.reports[name].summary, flush=True)
    return entry


def _coverage(report: Report) -> str:
    seen = report.figures.get("coverage")
    if not seen:
        return "-"
    after = seen["forwards"] - seen["prefills"]
    return (
        f"{seen['verifications']} of {after} forwards verified guesses; {seen['calls_ahead']} of {seen['calls']} calls "
        f"committed more tokens than forwards; {seen['tokens_per_forward']:.2f} tokens per forward"
    )


def _found(report: Report) -> str:
    """The summary without its "check_x passed: " heading, whole."""
    return report.summary.split(": ", 1)[-1].replace("|", "/").replace("\n", " ").rstrip(".")


def markdown(done: list[Entry]) -> str:
    """The docs page."""
    lines = [
        "# Conformance of public implementations",
        "",
        "The oracle of [Testing your own decoder](testing-your-decoder.md) run at its defaults on every public",
        "implementation that can be installed on this project's machine, by",
        "`python -m mtdecode.testing.conformance --write docs/conformance.md --lade lade-venv/bin/python`",
        "(lade's venv: [A decoder in another environment](examples/lade.md)). A verdict is *conforms*, *fails*,",
        "*crashed* or *inconclusive* (the check never saw a guess verified, so the path under test never ran).",
        "",
        "| implementation | version | check | verdict | coverage | seconds |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for entry in done:
        for name, report in entry.reports.items():
            lines.append(
                f"| {entry.name} | {entry.version} | {name} | **{report.verdict}** | {_coverage(report)} | "
                f"{entry.seconds[name]:.0f} |"
            )
    lines += ["", "## What was found", ""]
    for entry in done:
        lines.append(f"**{entry.name}** ({entry.what}):")
        lines.append("")
        for name, report in entry.reports.items():
            lines.append(f"- {name}, {report.verdict}: {_found(report)}.")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", help="write the Markdown page here")
    parser.add_argument("--lade", help="the Python of a venv with lade 0.0.2 (docs/examples/lade.md)")
    args = parser.parse_args(argv)
    done = [run(entry) for entry in entries(args.lade)]
    page = markdown(done)
    if args.write:
        Path(args.write).write_text(page + "\n")
    print(page)


if __name__ == "__main__":
    main()
