"""Batched greedy decoding against transformers' batched `generate`, and each strategy at batch 8.

Part 1: greedy tokens/s at batch 1, 8 and 32 for `mtdecode.generate(..., Autoregressive())`
and transformers' `generate(do_sample=False)` on the same left-padded prompts, interleaved in
one process (who goes first alternates), on the default model. Rows stop at the end-of-turn
token; tokens/s counts every row's tokens up to and including it.

Part 2: at batch 8, the speed-up of every strategy in the registry over batched greedy
(`Autoregressive`), interleaved the same way, with tokens per target forward of a row.

    python benchmarks/batch_throughput.py [--rounds 2] [--new-tokens 32] [--batches 1 8 32]
"""

import argparse
import time

import torch
from tqdm import tqdm

import mtdecode
from mtdecode.bench import load_suite
from mtdecode.strategies import REGISTRY, Autoregressive, needs_draft


def chat_prompts(tokenizer, count: int) -> list[list[int]]:
    """`count` prompts from the benchmark suite (every task, in turn), tokenized with the chat template."""
    tasks = load_suite()["tasks"]
    messages = [m for task in tasks.values() for m in task["prompts"]]
    chosen = [messages[i % len(messages)] for i in range(count)]
    return [tokenizer.apply_chat_template(m, add_generation_prompt=True)["input_ids"] for m in chosen]


def up_to_eos(row: list[int], eos: int) -> list[int]:
    return row[: row.index(eos) + 1] if eos in row else row


def ours(model, prompts, new_tokens, eos, strategy=None):
    """mtdecode, one batched call; returns each row's tokens and the row forwards."""
    result = mtdecode.generate(
        model,
        prompts,
        strategy or Autoregressive(),
        max_new_tokens=new_tokens,
        eos_token_id=eos,
        pad_token_id=eos,
        seed=0,
    )
    return [result.row(b) for b in range(len(prompts))], result.stats.row_forwards


def theirs(model, prompts, new_tokens, eos):
    """transformers' generate on left-padded prompts; returns each row's tokens up to EOS."""
    width = max(map(len, prompts))
    ids = torch.tensor([[eos] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    out = model.hf.generate(
        ids,
        attention_mask=mask,
        do_sample=False,
        max_new_tokens=new_tokens,
        eos_token_id=eos,
        pad_token_id=eos,
        top_k=None,
        top_p=None,
        temperature=None,
    )
    return [up_to_eos(row, eos) for row in out[:, width:].tolist()], None


def race(runners: dict, rounds: int, label: str) -> dict:
    """Run every runner `rounds` times, alternating who goes first; sum seconds and tokens."""
    totals = {name: {"seconds": 0.0, "tokens": 0, "forwards": 0, "rows": None} for name in runners}
    names = list(runners)
    for r in tqdm(range(rounds), desc=label, unit="round"):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            start = time.perf_counter()
            rows, forwards = runners[name]()
            totals[name]["seconds"] += time.perf_counter() - start
            totals[name]["tokens"] += sum(map(len, rows))
            totals[name]["forwards"] += forwards or 0
            totals[name]["rows"] = rows
    return totals


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--strategy-batch", type=int, default=8)
    args = parser.parse_args()

    model, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
    eos = tokenizer.eos_token_id
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.new_tokens} new tokens per row\n")
    ours(model, chat_prompts(tokenizer, 2), 4, eos), theirs(model, chat_prompts(tokenizer, 2), 4, eos)  # warm-up

    print("batch  mtdecode tok/s  transformers tok/s  ratio  identical rows")
    for batch in args.batches:
        prompts = chat_prompts(tokenizer, batch)
        runners = {
            "mtdecode": lambda p=prompts: ours(model, p, args.new_tokens, eos),
            "transformers": lambda p=prompts: theirs(model, p, args.new_tokens, eos),
        }
        t = race(runners, args.rounds, f"greedy, batch {batch}")
        speed = {name: v["tokens"] / v["seconds"] for name, v in t.items()}
        same = sum(a == b for a, b in zip(t["mtdecode"]["rows"], t["transformers"]["rows"], strict=True))
        ratio = speed["mtdecode"] / speed["transformers"]
        print(f"{batch:>5}  {speed['mtdecode']:>14.1f}  {speed['transformers']:>18.1f}  {ratio:5.2f}  {same}/{batch}")

    batch = args.strategy_batch
    prompts = chat_prompts(tokenizer, batch)
    draft = mtdecode.load_model(mtdecode.DRAFT_MODEL)
    runners = {}
    for name, cls in REGISTRY.items():
        strategy = cls(draft=draft) if needs_draft(cls) else cls()
        if name != "autoregressive":
            ours(model, prompts[:1], 2, eos, strategy)  # warm-up (lookahead measures its forward costs once)
        runners[name] = lambda s=strategy: ours(model, prompts, args.new_tokens, eos, s)
    t = race(runners, args.rounds, f"strategies, batch {batch}")
    base = t["autoregressive"]["tokens"] / t["autoregressive"]["seconds"]
    print(f"\nbatch {batch}: strategy  tok/s  speed-up over batched greedy  tokens per row forward  identical rows")
    for name, v in t.items():
        speed = v["tokens"] / v["seconds"]
        same = sum(a == b for a, b in zip(v["rows"], t["autoregressive"]["rows"], strict=True))
        exact = "" if getattr(REGISTRY[name], "exact", True) else " (not exact by design)"
        per_forward = v["tokens"] / v["forwards"]
        print(f"  {name:<15} {speed:6.1f}  {speed / base:5.2f}x  {per_forward:5.2f}  {same}/{batch}{exact}")


if __name__ == "__main__":
    main()
