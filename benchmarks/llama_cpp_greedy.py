"""llama.cpp's lookahead, lookup and speculative decoding on the real model, against llama.cpp's own greedy.

    python benchmarks/llama_cpp_greedy.py [--per-task 3] [--tokens 64] [--json FILE]

Needs `make engines` (llama.cpp's programs and llama-cpp-python). The target is the shipped GGUF file of
SmolLM2-135M-Instruct (Q4_1), which llama.cpp runs natively; the bench suite's chat prompts are rendered with
the model's chat template and passed as text, at temperature 0 with the programs' default settings otherwise
(float16 KV cache, 2 threads). The speculative programs draft with mtdecode's shipped draft (its 4 layers, with
the target's full output layer in place of its subset head), written as float32 GGUF with the target's tokenizer.

The reference is llama.cpp's greedy decoding itself, run through llama-cpp-python on the same libraries
(`mtdecode/testing/llama_cpp_python_worker.py`): the prompt as one batch, then one token per forward. Every
program's text is compared with the reference's, byte for byte, up to the reference's length (the programs
may write a token or two past `-n`: the last column counts the identical texts that go on past the
reference's end). Where a program's text departs, the reference's
margin there (its top logit minus the second) is shown against ε = 2δ, δ the largest logit difference between
the reference's path and one batched forward over the same text (measured on every prompt): a departure
within ε is a tie that llama.cpp's own batching can flip, one beyond it a bug. `llama-simple`, llama.cpp's
plain greedy program, is compared too: it must agree everywhere.
"""

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mtdecode.bench import load_suite
from mtdecode.testing.engines import llama_cpp_python_env
from mtdecode.testing.gguf_models import write_gguf
from mtdecode.testing.llama_cpp_programs import PROGRAMS, engines_folder, llama_cpp_bin, run_program
from mtdecode.zoo import DEFAULT_MODEL, DRAFT_MODEL, load_model, load_tokenizer
from mtdecode.zoo import _gguf_dir as gguf_dir

WORKER = Path(__file__).resolve().parents[1] / "mtdecode" / "testing" / "llama_cpp_python_worker.py"


def prompts(per_task: int) -> list[tuple[str, str]]:
    """(task, text) for the first `per_task` prompts of each task, rendered with the chat template."""
    tokenizer = load_tokenizer(DEFAULT_MODEL)
    chosen = []
    for task, spec in load_suite()["tasks"].items():
        for messages in spec["prompts"][:per_task]:
            chosen.append((task, tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)))
    return chosen


def reference(target: Path, texts: list[str], tokens: int) -> list[dict]:
    """llama.cpp's greedy decoding of each text, with its margins and δ (the worker's output)."""
    python = engines_folder() / "llama-cpp-python" / "bin" / "python"
    if not python.exists():
        sys.exit("llama-cpp-python is not built: run `make engines`")
    request = {"model": str(target), "threads": 2, "jobs": [{"prompt": t, "tokens": tokens} for t in texts]}
    done = subprocess.run(
        [str(python), str(WORKER)], input=json.dumps(request), capture_output=True, text=True,
        env=llama_cpp_python_env(), check=False,
    )  # fmt: skip
    if done.returncode != 0:
        sys.exit(f"the llama-cpp-python worker failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout)


def program_text(name: str, target: Path, draft: Path, text: str, tokens: int) -> bytes:
    """What program `name` writes after the prompt, greedy, with its default settings otherwise."""
    binary = llama_cpp_bin() / (PROGRAMS[name].binary if name in PROGRAMS else "llama-simple")
    if name == "simple":  # its own argument parser: model, count, prompt
        command = [str(binary), "-m", str(target), "-n", str(tokens), text]
    else:
        command = [str(binary), "-m", str(target), "-p", text, "-n", str(tokens), "--temp", "0", "-t", "2"]
        command += ["-md", str(draft), *PROGRAMS[name].flags] if PROGRAMS[name].draft else []
    if name == "simple":
        done = subprocess.run(command, capture_output=True, check=True)
        printed = done.stdout
    else:
        printed = run_program(command)[0].encode()
    printed = printed.replace(b"\x1b[0;96m", b"").replace(b"\x1b[0m", b"").strip(b"\n")
    return printed.split(text.encode(), 1)[-1] if text.encode() in printed else printed


def compare(got: bytes, ref: dict, epsilon: float) -> dict:
    """Where `got` departs from the reference's text, with the reference's margin there."""
    pieces = [bytes.fromhex(p) for p in ref["pieces"]]
    expected = b"".join(pieces)
    if got[: len(expected)] == expected:
        return {"identical": True, "longer_by_bytes": len(got) - len(expected)}
    first = next((i for i, (a, b) in enumerate(zip(got, expected, strict=False)) if a != b), len(got))
    ends = [sum(len(p) for p in pieces[: i + 1]) for i in range(len(pieces))]
    token = next(i for i, end in enumerate(ends) if end > first)  # the token whose text holds that byte
    margin = ref["margins"][token]
    return {"identical": False, "token": token, "margin": margin, "tie": margin <= epsilon}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-task", type=int, default=3, help="prompts per task of the bench suite")
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per prompt")
    parser.add_argument("--json", help="keep every comparison here")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    target = gguf_dir() / "SmolLM2-135M-Instruct.Q4_1.gguf"
    chosen = prompts(args.per_task)
    print(f"{len(chosen)} prompts, {args.tokens} new tokens, greedy; target {target.name}", flush=True)
    refs = reference(target, [text for _, text in chosen], args.tokens)
    delta = max(r["delta"] for r in refs)
    epsilon = 2 * delta
    print(f"δ = {delta:.4g} (one batched forward against the greedy path), ε = 2δ = {epsilon:.4g}", flush=True)
    with tempfile.TemporaryDirectory(prefix="mtdecode-draft-") as folder:
        draft_model = load_model(DRAFT_MODEL).hf
        draft = write_gguf(draft_model, Path(folder) / "draft.gguf", vocabulary_of=target)
        results, seconds = {}, {}
        for name in ["simple", *PROGRAMS]:
            rows, began = [], time.perf_counter()
            for number, ((task, text), ref) in enumerate(zip(chosen, refs, strict=True), 1):
                print(f"\r{name}: prompt {number}/{len(chosen)}", end="", file=sys.stderr, flush=True)
                got = program_text(name, target, draft, text, args.tokens)
                rows.append({"task": task, **compare(got, ref, epsilon)})
            print(file=sys.stderr)
            results[name], seconds[name] = rows, time.perf_counter() - began
    print()
    print("| program | identical to llama.cpp's greedy | departures (token, margin) | of those, longer | seconds |")
    print("| --- | --- | --- | --- | --- |")
    for name, rows in results.items():
        same = sum(r["identical"] for r in rows)
        away = [
            f"{r['task']} #{r['token']}: {r['margin']:.3g}, {'tie' if r['tie'] else 'bug'}"
            for r in rows
            if not r["identical"]
        ]
        longer = sum(r.get("longer_by_bytes", 0) > 0 for r in rows)
        cells = [name, f"{same} of {len(rows)}", "; ".join(away) or "-", f"{longer} of {same}", f"{seconds[name]:.0f}"]
        print("| " + " | ".join(cells) + " |")
    print(f"\nε = {epsilon:.4g}; {time.perf_counter() - start:.0f} s")
    if args.json:
        Path(args.json).write_text(json.dumps({"epsilon": epsilon, "delta": delta, "results": results}, indent=1))


if __name__ == "__main__":
    main()
