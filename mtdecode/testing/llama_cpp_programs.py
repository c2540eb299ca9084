"""llama.cpp's decoding programs as oracle decoders: its lookahead, lookup and speculative decoding judged by the
same checks as any decoder.

`llama_cpp_decoder("lookahead")` is a decoder (`mtdecode.testing.decoders`) that, for each call, runs the
program `llama-lookahead` on the model written as GGUF (`mtdecode.testing.gguf_models`, once per model), with
the prompt spelled as text, and reads the new tokens back from what it prints. The programs are built by
`python -m mtdecode.testing.engines build` (`make engines`), not by the test suite.

- **Settings.** Greedy is `--temp 0`. Sampling passes `--temp`, `--top-k` (0: off), `--top-p` (1: off),
  `--min-p 0` and `--samplers temperature;top_k;top_p`, the order `mtdecode.sampling` (and transformers) apply
  them in, and `--seed`. The KV cache is float32 (`-ctk f32 -ctv f32`; llama.cpp's default is float16), one
  thread, no other sampler.
- **What it printed.** The programs print the prompt, then the new tokens (lookahead colours the accepted ones)
  on standard output, and their counts on standard error. Everything after the echoed prompt is read back as
  tokens, all of it: a program that writes more tokens than `-n` asked for breaks the decoder contract, and the
  check says so. `cut_to_budget=True` keeps only the first `max_new_tokens`, so that the tokens can be judged
  apart from the length. `llama-speculative-simple` does not print the end-of-sequence token it stops at: when
  it stops short of the budget on a model with one, the decoder adds that token (any other early stop then
  shows as a difference from greedy).
- **Coverage.** The program's own counts (`n_drafted`, `n_accept`) go to the check's coverage
  (`Coverage.reported`): llama.cpp runs its own copy of the model, so no forward of the oracle's is seen.
- **Exactness.** The decoder declares `runs_own_copy`: llama.cpp adds in its own order, so even in float32 a
  difference from greedy is allowed at a near-tie (`mtdecode.testing.ties.other_implementation_bound`).
- **Lost output.** llama.cpp's programs log through a thread that the program does not wait for at exit (its
  logger is leaked on purpose, see `common/log.cpp`), so a fast run sometimes ends with exit code 0 having
  printed only part of its output, or nothing. A run whose standard error lacks its closing counts
  (`n_predict = ...`, printed after the tokens) is run again with the same seed, up to `RERUNS` times; the
  decoder counts these (`lost_runs`), and the conformance page reports them.
- **Errors.** A program that exits with an error, is killed, runs past `TIMEOUT` seconds, or loses its output
  `RERUNS` + 1 times raises `DecoderError` (crashed) with the end of its standard error.
"""

import atexit
import os
import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mtdecode.testing import coverage
from mtdecode.testing.decoders import DecoderError, noisy_assistant
from mtdecode.testing.gguf_models import read_spelled, spell, write_gguf
from mtdecode.testing.workers import STDERR_TAIL, Worker, kept_file

#: seconds one program run may take before it counts as hung (a tiny model decodes in about 0.03 s)
TIMEOUT = 120
#: how many times a run that lost its output is run again
RERUNS = 10
#: the colour escapes lookahead wraps accepted tokens in
_ESCAPES = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Program:
    """One of llama.cpp's example programs and how to drive it."""

    binary: str
    #: what it does, for reports
    what: str
    #: whether it takes a draft model (`-md`)
    draft: bool = False
    #: flags it needs beyond the common ones
    flags: tuple[str, ...] = ()
    #: whether it prints the end-of-sequence token it stops at (`llama-speculative-simple` does not)
    prints_end: bool = True


PROGRAMS = {
    "lookahead": Program("llama-lookahead", "lookahead decoding (W = 15, N = 5, G = 15, fixed in its source)"),
    "lookup": Program("llama-lookup", "prompt lookup: n-gram drafts from the context, sample and match"),
    "speculative": Program(
        "llama-speculative", "speculative decoding with a draft model, rejection sampling with a residual", draft=True
    ),
    "speculative-simple": Program(
        "llama-speculative-simple", "speculative decoding with a draft model, sample and match", draft=True,
        flags=("--spec-type", "draft-simple"), prints_end=False,
    ),
}


def engines_folder() -> Path:
    """Where `make engines` keeps the engines: `$MTDECODE_ENGINES`, or `engines/` beside the package's project."""
    return Path(os.environ.get("MTDECODE_ENGINES") or Path(__file__).resolve().parents[2] / "engines")


def llama_cpp_bin() -> Path:
    """The folder of the built llama.cpp programs; a clear error if they are not built."""
    folder = engines_folder() / "llama.cpp" / "build" / "bin"
    if not (folder / "llama-lookahead").exists():
        raise FileNotFoundError(
            f"llama.cpp's programs are not built in {folder}: run `make engines` "
            "(python -m mtdecode.testing.engines build), or set MTDECODE_ENGINES to where they were built"
        )
    return folder


def llama_cpp_decoder(
    name: str, *, cut_to_budget: bool = False, bin_folder: str | Path | None = None, draft_noise: float = 0.3
) -> Callable:
    """The llama.cpp program `name` (a key of `PROGRAMS`) as a decoder (see the module docstring).

    **Arguments:**

    - `cut_to_budget`: keep only the first `max_new_tokens` new tokens (judge the tokens apart from the length).
    - `bin_folder`: where the programs are (default `llama_cpp_bin()`).
    - `draft_noise`: the draft of the speculative programs is the model with Gaussian noise of this relative
      size on every weight (`mtdecode.testing.decoders.noisy_assistant`), written as GGUF too.
    """
    if name not in PROGRAMS:
        raise ValueError(f"unknown llama.cpp program {name!r}; choose from {', '.join(PROGRAMS)}")
    program = PROGRAMS[name]
    folder = Path(bin_folder) if bin_folder is not None else None

    def decoder(model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed):
        binary = (folder or llama_cpp_bin()) / program.binary
        command = [str(binary), "-m", str(gguf_of(model)), "-p", spell(prompt), "-n", str(max_new_tokens)]
        if program.draft:
            command += ["-md", str(gguf_of(noisy_assistant(model, scale=draft_noise)))]
        command += [*program.flags, *sampling_flags(temperature, top_k, top_p, seed)]
        command += ["-ctk", "f32", "-ctv", "f32", "-t", "1", "-c", str(model.config.max_position_embeddings)]
        printed, counts, lost = run_program(command)
        decoder.lost_runs += lost
        tokens = read_new_tokens(printed, prompt, model.config.vocab_size)
        eos = model.generation_config.eos_token_id  # (not CausalLM.wrap: its first wrap probes the model)
        if not program.prints_end and eos is not None and len(tokens) < max_new_tokens:
            tokens.append(eos if isinstance(eos, int) else eos[0])  # it stopped at the EOS it does not print
        record = coverage.active()
        if record is not None:
            record.reported(drafted=counts.get("n_drafted"), accepted=counts.get("n_accept", 0))
        return tokens[:max_new_tokens] if cut_to_budget else tokens

    decoder.runs_own_copy = True
    decoder.lost_runs = 0  # runs that lost their output and were run again
    decoder.restarted = lambda: decoder  # every call is a new process already (for check_seeds)
    made = f"llama_cpp_decoder({name!r}{', cut_to_budget=True' if cut_to_budget else ''})"
    decoder.__name__ = decoder.__qualname__ = made
    decoder.binding = f"from mtdecode.testing.llama_cpp_programs import llama_cpp_decoder\ndecoder = {made}"
    return decoder


def sampling_flags(temperature: float, top_k: int | None, top_p: float | None, seed: int) -> list[str]:
    """The sampler flags of llama.cpp's common arguments for one `Sampler` setting (see the module docstring)."""
    if temperature == 0:
        return ["--temp", "0", "--seed", str(seed)]
    return [
        "--temp", repr(float(temperature)), "--top-k", str(top_k or 0), "--top-p", repr(float(top_p or 1.0)),
        "--min-p", "0", "--samplers", "temperature;top_k;top_p", "--seed", str(seed),
    ]  # fmt: skip


def run_program(command: list[str]) -> tuple[str, dict[str, int], int]:
    """Run one program until its output is whole (see "Lost output" above); return its standard output, the counts
    (`name = number` lines) of its standard error, and how many runs lost their output first."""
    name = Path(command[0]).name
    for lost in range(RERUNS + 1):
        try:
            done = subprocess.run(command, capture_output=True, timeout=TIMEOUT, check=False)
        except subprocess.TimeoutExpired as error:
            tail = (error.stderr or b"").decode(errors="replace")[-STDERR_TAIL:]
            raise DecoderError(f"{name} ran past {TIMEOUT} s", crashed=True, traceback=tail) from None
        stderr = done.stderr.decode(errors="replace")
        if done.returncode != 0:
            raise DecoderError(f"{name} exited with {done.returncode}", crashed=True, traceback=stderr[-STDERR_TAIL:])
        counts = {name: int(value) for name, value in re.findall(r"\b(n_\w+)\s*=\s*(\d+)\s*$", stderr, re.MULTILINE)}
        if "n_predict" in counts:  # printed after the tokens: the output before it is whole
            return done.stdout.decode(errors="replace"), counts, lost
    raise DecoderError(
        f"{name} exited with 0 but lost its output (no closing counts) in {RERUNS + 1} runs", crashed=True,
        traceback=stderr[-STDERR_TAIL:],
    )


def read_new_tokens(printed: str, prompt: list[int], vocab: int) -> list[int]:
    """The tokens a program printed after echoing `prompt` (colour escapes and the blank lines around removed)."""
    text = _ESCAPES.sub("", printed).strip("\n")
    echoed = spell(prompt)
    if not text.startswith(echoed):
        raise DecoderError(f"the program did not print the prompt first; it printed {text[:200]!r}")
    try:
        return read_spelled(text[len(echoed) :], vocab)
    except ValueError as error:
        raise DecoderError(f"the program printed something that is not a token: {error}") from None


def gguf_of(model) -> Path:
    """`model` written as GGUF (once per model object; the file lives until the process ends)."""
    return kept_file(model, "model.gguf", lambda path: write_gguf(model, path))


WORKER = Path(__file__).with_name("llama_cpp_python_worker.py")


def llama_cpp_python_decoder(
    *, max_ngram_size: int = 2, num_pred_tokens: int = 10, folder: str | Path | None = None
) -> Callable:
    """llama-cpp-python's prompt lookup (`Llama(draft_model=LlamaPromptLookupDecoding(max_ngram_size,
    num_pred_tokens))`, its defaults) as a decoder. It runs in the venv `make engines` builds, on the libraries of
    llama.cpp's build, in one worker process kept for all calls (`llama_cpp_python_worker.py --serve`); the
    model crosses as GGUF (`gguf_of`, float32 KV cache). The worker's counts of drafted and accepted tokens go to
    the check's coverage. `restarted()` gives the same decoder in a new worker; `close()` ends the worker."""
    where = Path(folder) if folder is not None else engines_folder()
    python = where / "llama-cpp-python" / "bin" / "python"
    env = {"LLAMA_CPP_LIB_PATH": str(where / "llama.cpp" / "build" / "bin")}
    worker = Worker([str(python), str(WORKER), "--serve"], "llama-cpp-python", env=env, timeout=TIMEOUT)

    def decoder(model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed):
        if not python.exists():
            raise FileNotFoundError(f"llama-cpp-python is not built in {python.parent.parent}: run `make engines`")
        answer = worker.ask({
            "model": str(gguf_of(model)), "prompt": list(prompt), "max_new_tokens": max_new_tokens,
            "temperature": temperature, "top_k": top_k or 0, "top_p": top_p or 1.0, "seed": seed,
            "max_ngram_size": max_ngram_size, "num_pred_tokens": num_pred_tokens,
            "context": model.config.max_position_embeddings,
        })  # fmt: skip
        record = coverage.active()
        if record is not None:
            record.reported(drafted=answer["drafted"], accepted=answer["accepted"])
        return answer["tokens"]

    made = f"llama_cpp_python_decoder(max_ngram_size={max_ngram_size}, num_pred_tokens={num_pred_tokens})"
    decoder.runs_own_copy = True
    decoder.close = worker.close
    decoder.restarted = lambda: llama_cpp_python_decoder(
        max_ngram_size=max_ngram_size, num_pred_tokens=num_pred_tokens, folder=folder
    )
    decoder.__name__ = decoder.__qualname__ = made
    decoder.binding = f"from mtdecode.testing.llama_cpp_programs import llama_cpp_python_decoder\ndecoder = {made}"
    atexit.register(worker.close)
    return decoder
