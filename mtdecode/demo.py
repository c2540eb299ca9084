"""The main job (`make demo`): the default model answers one prompt with every strategy,
and a table compares them with greedy autoregressive decoding.

Run with `python -m mtdecode.demo [--prompt TEXT] [--max-new-tokens N]`.

The first run on a host measures its forward costs once for the strategies that tune themselves
(a progress line says so; the figures are kept in `~/.cache/mtdecode/costs`). Where a strategy
decides that plain greedy decoding is faster on this host, the table says so in its last column
instead of a `GreedyFallbackWarning`.
"""

import argparse
import functools
import warnings
from collections.abc import Callable
from pathlib import Path

import mtdecode
from mtdecode import store
from mtdecode.generate import GreedyFallbackWarning
from mtdecode.strategies import REGISTRY, Autoregressive, needs_draft

PROMPT = "Explain in three short sentences why the sky is blue."
HEADER = ("strategy", "new tokens", "tokens/target forward", "tokens/s", "identical to greedy", "note")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", default=PROMPT)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args(argv)

    print(f"loading {mtdecode.DEFAULT_MODEL} ...", flush=True)
    model = mtdecode.load_model()
    tokenizer = mtdecode.load_tokenizer()
    drafts: list = []

    def draft():
        drafts[:] = drafts or [mtdecode.load_model(mtdecode.DRAFT_MODEL)]
        return drafts[0]

    contenders = {
        name: (lambda cls=cls: cls(draft=draft())) if needs_draft(cls) else cls for name, cls in REGISTRY.items()
    }
    run(model, tokenizer, contenders, args.prompt, args.max_new_tokens)


def run(model, tokenizer, contenders: dict[str, Callable], text: str, max_new_tokens: int) -> list[tuple]:
    """Answer `text` greedily, then with each contender (a name and a function that makes the strategy), and print
    the answer and the table; returns the table's rows."""
    messages = [{"role": "user", "content": text}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]
    settings = dict(max_new_tokens=max_new_tokens, eos_token_id=tokenizer.eos_token_id)
    # warm-up, so the first strategy's time is not spent on one-off allocations
    mtdecode.generate(model, prompt, Autoregressive(), max_new_tokens=4)
    greedy = mtdecode.generate(model, prompt, Autoregressive(), **settings)
    print(f"\nprompt: {text}\nanswer: {tokenizer.decode(greedy.tokens[0], skip_special_tokens=True)}\n", flush=True)

    rows = []
    for name, make in contenders.items():
        strategy = make()
        with store.announcing(functools.partial(_measuring, name)), warnings.catch_warnings():
            warnings.simplefilter("ignore", GreedyFallbackWarning)  # the warm-up's own choice is not the run's
            mtdecode.generate(model, prompt, strategy, max_new_tokens=4)  # warm-up (a tuned strategy measures here)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", GreedyFallbackWarning)
            result = mtdecode.generate(model, prompt, strategy, **settings)
        for warning in caught:  # anything but the greedy verdict is shown as it came
            if not issubclass(warning.category, GreedyFallbackWarning):
                warnings.showwarning(warning.message, warning.category, warning.filename, warning.lineno)
        same = result.tokens[0].tolist() == greedy.tokens[0].tolist()
        expected = "" if getattr(strategy, "exact", True) else " (not exact by design)"
        greedily = any(issubclass(w.category, GreedyFallbackWarning) for w in caught)
        note = "decodes greedily on this host" if greedily else ""
        s = result.stats
        rows.append((name, s.new_tokens, f"{s.tokens_per_forward:.2f}", f"{s.tokens_per_second:.1f}",
                     ("yes" if same else "NO") + expected, note))  # fmt: skip
    print_table(HEADER, rows)
    return rows


def _measuring(name: str, kind: str, folder: Path) -> None:
    shown = f"~/{folder.relative_to(Path.home())}" if folder.is_relative_to(Path.home()) else str(folder)
    print(f"  {name}: measuring this host's {kind} figures, once (kept in {shown}) ...", flush=True)


def print_table(header: tuple[str, ...], rows: list[tuple]) -> None:
    widths = [max(len(str(x)) for x in column) for column in zip(header, *rows, strict=True)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*header).rstrip())
    print(line.format(*("-" * w for w in widths)))
    for row in rows:
        print(line.format(*map(str, row)).rstrip())


if __name__ == "__main__":
    main()
