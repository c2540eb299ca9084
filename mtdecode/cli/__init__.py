"""The `mtdecode` command line: watch a strategy decode, benchmark every strategy, draw the masks.

    mtdecode generate --strategy lookahead --prompt "Why is the sky blue?" [--set window=5 ...]
    mtdecode bench [--quick] [--json FILE] [--plot FILE.png]
    mtdecode masks lookahead --window 4 --ngram 3 --guesses 2 --out mask.png
    mtdecode masks batch --draft-tokens 2 --out batch.png     # one panel per row of a batch
    mtdecode check mypackage.module:my_decoder [--checks greedy sampling seeds] [--python PATH] [--json FILE]
    mtdecode costs [--model MODEL] [--measure-again]
    torchrun --nproc-per-node 2 -m mtdecode bench --quick --tp   # the target sharded over 2 ranks; rank 0 prints

Strategies come from `mtdecode.strategies.REGISTRY`, and their settings from the fields of
their dataclasses, so a strategy added to the registry shows up here with nothing else to
wire. Bad arguments end in a one-line error and exit code 2.
"""

import argparse
import contextlib
import os
import sys

from mtdecode import bench as suite
from mtdecode.cli.check import check
from mtdecode.cli.commands import QUICK, bench, costs, generate, masks
from mtdecode.cli.common import (
    DTYPES,
    Parser,
    UsageError,
    add_model_arguments,
    add_tp_argument,
    at_least_zero,
    positive,
)
from mtdecode.strategies import REGISTRY
from mtdecode.zoo import DEFAULT_MODEL


def build_parser() -> Parser:
    parser = Parser(prog="mtdecode", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    g = commands.add_parser("generate", help="answer one prompt, coloured by step")
    g.add_argument("--strategy", required=True, choices=list(REGISTRY))
    g.add_argument("--prompt", required=True)
    add_model_arguments(g)
    g.add_argument("--temperature", type=float, default=0.0, help="0 is greedy (default)")
    g.add_argument("--top-k", type=int)
    g.add_argument("--top-p", type=float)
    g.add_argument("--max-new-tokens", type=at_least_zero, default=128)
    g.add_argument("--seed", type=int, help="seed for sampling (default: a fresh one each run)")
    g.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a strategy setting, e.g. window=5")
    g.add_argument("--html", help="also write the coloured trace to this HTML file")
    g.add_argument("--color", choices=("auto", "always", "never"), default="auto")
    g.set_defaults(run=generate)

    b = commands.add_parser("bench", help="every strategy and transformers' decoders on the prompt suite")
    add_model_arguments(b)
    b.add_argument("--quick", action="store_true", help=f"1 prompt per task, {QUICK['max_new_tokens']} new tokens")
    b.add_argument("--strategies", nargs="+", choices=[*REGISTRY, *suite.PEERS], help="default: all, and the peers")
    b.add_argument("--tasks", nargs="+", choices=list(suite.load_suite()["tasks"]))
    b.add_argument("--prompts-per-task", type=positive)
    b.add_argument("--max-new-tokens", type=positive)
    b.add_argument(
        "--set", action="append", default=[], metavar="NAME.KEY=VALUE", help="e.g. speculative.num_draft_tokens=1"
    )
    b.add_argument("--eagle-head", action="append", default=[], metavar="FOLDER", help="also race EAGLE with the "
                   "head exported to FOLDER (python -m mtdecode.recipes.eagle export --out FOLDER), as eagle:NAME")
    b.add_argument("--dtype", choices=DTYPES[1:], help="the models' dtype (default float32); in bfloat16 and float16 "
                   "a run that differs from greedy's is judged up to ties (docs/concepts/rounding.md)")
    b.add_argument("--json", help="write the results to this JSON file")
    b.add_argument("--plot", help="draw speed-up and tokens per forward to this PNG file")
    b.add_argument("--no-progress", action="store_true", help="no progress bar")
    b.set_defaults(run=bench)

    m = commands.add_parser("masks", help="draw the attention mask a strategy builds")
    m.add_argument("kind", choices=("lookahead", "speculative", "tree", "causal", "batch"))
    m.add_argument("--out", required=True, help="picture file (.png, .svg, ...)")
    m.add_argument("--prefix", type=at_least_zero, default=2, help="committed tokens already in the cache")
    m.add_argument("--window", type=positive, default=4, help="lookahead: W, the window's columns")
    m.add_argument("--ngram", type=positive, default=3, help="lookahead: N, the n-gram size (N-1 window rows)")
    m.add_argument("--guesses", type=at_least_zero, default=2, help="lookahead: G, candidate n-grams verified")
    m.add_argument("--draft-tokens", type=positive, default=4, help="speculative, batch: k, the draft's guesses")
    m.add_argument(
        "--parents", default="-1,0,0,1,-1", help="tree: each node's parent, -1 for the prefix (--parents=-1,0)"
    )
    m.add_argument("--length", type=positive, default=4, help="causal: new tokens")
    m.set_defaults(run=masks)

    c = commands.add_parser(
        "check", help="check a decoder of your own against the oracle (mtdecode.testing); exit 0 conforms, 1 fails, "
        "2 usage error, 3 the decoder crashed, 4 inconclusive (it never verified a guess)")
    c.add_argument("target", help="package.module:function or file.py:function, a decoder(model, prompt, *, "
                   "max_new_tokens, temperature, top_k, top_p, seed); the current folder is importable")
    c.add_argument("--checks", nargs="+", choices=("greedy", "sampling", "seeds"),
                   default=["greedy", "sampling", "seeds"], help="which checks to run (default: all three)")
    c.add_argument("--sampling", action="store_true", help=argparse.SUPPRESS)  # the default now; old scripts pass it
    c.add_argument("--families", nargs="+", metavar="MODEL",
                   help="greedy: which tiny models (default all: llama qwen2 mistral-window llama-32k llama-eos "
                   "llama-ties)")
    c.add_argument("--examples", type=positive, help="greedy: Hypothesis examples per model (default 25)")
    c.add_argument("--max-prompt", type=positive, help="greedy: the longest prompt generated (default 300)")
    c.add_argument("--samples", type=positive, help="sampling: runs per setting (default 20,000 for a decoder that "
                   "takes batches, else 5,000)")
    c.add_argument("--tokens", type=positive, default=None, help="sampling: tokens per block (default 2, or 3 "
                   "when the decoder guessed nothing in 2-token runs; 3 for bugs that show after two accepted guesses)")
    c.add_argument(
        "--dtype", choices=DTYPES, help="the models' dtype (default float64 for the oracle's tiny models, float32 for "
        "--model); bfloat16 and float16 are judged exact up to ties (docs/concepts/rounding.md)")
    c.add_argument("--model", help="check greedy decoding on this local model folder (or the embedded model's name) "
                   "instead of the oracle's tiny models")
    c.add_argument("--device", default="cpu", help="torch device for --model (cpu, cuda, ...)")
    add_tp_argument(c)
    c.add_argument("--python", metavar="PATH", help="run the decoder in this other interpreter (a venv with another "
                   "transformers, no mtdecode needed), through a subprocess bridge that moves the models exactly")
    c.add_argument("--plain", action="store_true", help="the decoder does not guess (plain greedy or sampling): do "
                   "not call it inconclusive for never verifying a guess")
    c.add_argument("--json", help="write the reports to this JSON file")
    c.set_defaults(run=check)

    k = commands.add_parser("costs", help="this host's forward costs (kept on disk) and what the policies choose")
    k.add_argument("--model", default=DEFAULT_MODEL, help="the embedded model's name or a local model folder")
    k.add_argument("--device", default="cpu", help="torch device for the model (cpu, cuda, ...)")
    k.add_argument("--measure-again", action="store_true", help="forget every kept measurement first")
    k.add_argument("--record-reference", action="store_true",
                   help="measure the course's reference costs on this (idle!) host into mtdecode/zoo/costs/")
    k.set_defaults(run=costs)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code (2 for a bad argument)."""
    from transformers.utils import logging

    logging.disable_progress_bar()  # per-file loading bars; the CLI prints its own progress
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if getattr(args, "tp", False) and os.environ.get("RANK", "0") != "0":  # rank 0 prints for all
            args.no_progress = True
            with open(os.devnull, "w") as quiet, contextlib.redirect_stdout(quiet):
                return args.run(args)
        return args.run(args)
    except UsageError as error:
        print(f"mtdecode: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("\nmtdecode: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
