"""SmolLM2's forward with the cells nobody reads skipped by its MLPs and output layer, against computing them all.

For B rows after their cache, one forward over n new tokens per row in which the first k rows have finished (their
outputs are not read, as `Session.commit` marks them), timed with `mtdecode.tokenwise` skipping the unread cells and
with it computing every cell (in turn, who goes first alternating), the paired median of the repeats. Then the
prompts' forward over the code-editing prompts, whose left padding is the unread cells. Each case says whether the
rule (`mtdecode.tokenwise.skipping`) skips there, and the run ends with the largest difference between the read
rows' logits in the two (0: bit for bit).

    python benchmarks/tokenwise_skip.py [--rows 4] [--new 1 2 4 6 8] [--repeats 9]
"""

import argparse
import statistics
import time

import torch

import mtdecode
from mtdecode import Runner, tokenwise
from mtdecode.bench import load_suite

#: `FEWEST_SKIPPED` as the library sets it, and what it becomes to compute every cell
FEWEST, NEVER = tokenwise.FEWEST_SKIPPED, 10**9


def seconds(runner: Runner, new_tokens: torch.Tensor, skip: bool) -> tuple[float, torch.Tensor]:
    """One forward over `new_tokens` after the runner's cache, skipping or not; its entries are dropped again."""
    tokenwise.FEWEST_SKIPPED = FEWEST if skip else NEVER
    held = runner.cache.lengths
    start = time.perf_counter()
    logits = runner.extend(new_tokens)
    took = time.perf_counter() - start
    runner.cache.crop(held)
    return took, logits


def paired(times: dict[bool, list[float]]) -> str:
    """The median of computing all over skipping, pair by pair."""
    return f"{statistics.median(a / b for a, b in zip(times[False], times[True], strict=True)):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--new", type=int, nargs="+", default=[1, 2, 4, 6, 8])
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()

    model, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
    code = load_suite()["tasks"]["code"]["prompts"]  # as benchmarks/batch_throughput.py feeds them
    chosen = [code[i % len(code)] for i in range(args.rows)]
    prompts = [tokenizer.apply_chat_template(m, add_generation_prompt=True)["input_ids"] for m in chosen]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.rows} code prompts as the cache")
    print(f"{'new':>4} {'finished':>8} {'skips':>5} {'all ms':>7} {'skipping ms':>11} {'all / skipping':>14}")
    runner = Runner(model, "tokenwise")
    runner.extend(prompts, logits_to_keep=1)
    runner.cache.commit()
    generator = torch.Generator().manual_seed(0)
    differences = []
    for new in args.new:
        fed = torch.randint(0, model.vocab_size, (args.rows, new), generator=generator)
        for finished in range(1, args.rows):
            runner.rows_read = torch.arange(args.rows) >= finished
            skips = tokenwise.skipping(runner.rows_read[:, None].expand(-1, new)) is not None
            times: dict[bool, list[float]] = {True: [], False: []}
            for repeat in range(args.repeats + 1):  # the first round warms up
                results = {}
                for skip in (True, False) if repeat % 2 == 0 else (False, True):
                    took, results[skip] = seconds(runner, fed, skip)
                    if repeat:
                        times[skip].append(took)
                read = runner.rows_read
                differences.append(float((results[True][read] - results[False][read]).abs().max()))
            medians = [1000 * statistics.median(times[skip]) for skip in (False, True)]
            print(f"{new:4} {finished:8} {'yes' if skips else 'no':>5} {medians[0]:7.1f} {medians[1]:11.1f} "
                  f"{paired(times):>14}")  # fmt: skip
    print(f"the read rows' logits, skipping against computing all: largest difference {max(differences):.3g}")
    runner.rows_read = None
    lengths = [len(p) for p in prompts]
    times = {True: [], False: []}
    for repeat in range(max(2, args.repeats // 3) + 1):
        for skip in (True, False) if repeat % 2 == 0 else (False, True):
            tokenwise.FEWEST_SKIPPED = FEWEST if skip else NEVER
            start = time.perf_counter()
            Runner(model, "tokenwise").extend(prompts, logits_to_keep=1)
            if repeat:
                times[skip].append(time.perf_counter() - start)
    tokenwise.FEWEST_SKIPPED = FEWEST
    medians = [1000 * statistics.median(times[skip]) for skip in (False, True)]
    padding = len(prompts) * max(lengths) - sum(lengths)
    print(f"the prompts' forward ({lengths} tokens, {padding} cells of padding): all {medians[0]:.0f} ms, "
          f"skipping {medians[1]:.0f} ms, all / skipping {paired(times)}")  # fmt: skip


if __name__ == "__main__":
    main()
