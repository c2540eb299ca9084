"""Every strategy at its defaults on SmolLM2 sharded over the ranks of `torchrun`: greedy's tokens, on every rank.

    torchrun --nproc-per-node 2 benchmarks/tensor_parallel.py [--prompts-per-task 1] [--max-new-tokens 32]

Before `torch.distributed` starts, each rank decodes the bench suite's prompts greedily with the whole model: a single
process's tokens. Then it loads the target sharded (`mtdecode.zoo.tensor_parallel_plan`: on 2 ranks the MLPs alone,
since SmolLM2's 9 heads do not split in two), and its draft and EAGLE head whole, and decodes every prompt with every
strategy at its defaults, which measure this launch's costs on first use, and with the exact strategies at fixed
settings, which verify guesses at every step whatever the costs. Rank 0 prints, per strategy: tokens per
target forward; runs identical to greedy decoding on the sharded model, and to the single process's; and at each
difference, the gap by which the strategy's token trails greedy's argmax there (read on the strategy's own text) and
greedy's top-2 margin. MTAD and MMTAD are not exact by design; their rows show that they return and agree on every
rank. Every rank's tokens are compared at the end (and at every step, by `generate`).
"""

import argparse
import sys

import torch

import mtdecode
from mtdecode import bench as suite
from mtdecode import distributed
from mtdecode.strategies import REGISTRY, Eagle, Jacobi, Lookahead, PromptLookup, Speculative, needs_draft
from mtdecode.testing.ties import greedy_differences
from mtdecode.zoo import DRAFT_MODEL, tensor_parallel_plan


def prompts(per_task: int) -> list[list[int]]:
    """The first `per_task` prompts of every task of the bench's suite, tokenized as `mtdecode bench` does."""
    tokenizer, tasks = mtdecode.load_tokenizer(), suite.load_suite()["tasks"]
    return [suite.tokenize(tokenizer, messages) for task in tasks.values() for messages in task["prompts"][:per_task]]


def greedy(model, texts: list[list[int]], new_tokens: int) -> list[list[int]]:
    """Greedy decoding's tokens for each prompt."""
    strategy = mtdecode.strategies.Autoregressive()
    return [mtdecode.generate(model, p, strategy, max_new_tokens=new_tokens).tokens[0].tolist() for p in texts]


def gaps(model, prompt: list[int], got: list[int]) -> list[str]:
    """Where `got` is not greedy's argmax on `model`: the gap and greedy's top-2 margin, as text."""
    return [f"{d.gap:.2g} (top-2 {d.top2:.2g})" for d in greedy_differences(model, prompt, got)]


def contenders(draft) -> dict[str, object]:
    """Every strategy at its defaults, and the exact ones at fixed settings that verify guesses at every step."""
    defaults = {name: cls(draft) if needs_draft(cls) else cls() for name, cls in REGISTRY.items()}
    fixed = {"speculative k=4": Speculative(draft, 4), "jacobi k=4": Jacobi(4),
             "prompt_lookup k=4": PromptLookup(num_draft_tokens=4), "lookahead 4,3,4": Lookahead(4, 3, 4),
             "eagle 10 nodes": Eagle(tree_size=10)}  # fmt: skip
    return defaults | fixed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts-per-task", type=int, default=1)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    args = parser.parse_args()
    texts, new = prompts(args.prompts_per_task), args.max_new_tokens

    whole = mtdecode.load_model()  # a single process: torch.distributed has not started
    alone = greedy(whole, texts, new)
    plan = tensor_parallel_plan()
    target = mtdecode.load_model(tp_plan=plan)  # starts torch.distributed
    draft = mtdecode.load_model(DRAFT_MODEL)
    say = print if distributed.rank() == 0 else lambda *_, **__: None
    say(f"SmolLM2-135M-Instruct, float32, sharded over {distributed.ranks()} ranks (plan {plan!r}); "
        f"{len(texts)} prompts, {new} new tokens; every strategy at its defaults, then fixed settings\n")  # fmt: skip
    reference = greedy(target, texts, new)
    say(f"{'strategy':18} tokens/forward  = sharded greedy  = single process  differences (gap, top-2 margin)")
    made = {}
    for name, strategy in contenders(draft).items():
        runs = [mtdecode.generate(target, p, strategy, max_new_tokens=new) for p in texts]
        made[name] = [run.tokens[0].tolist() for run in runs]
        forwards = sum(run.stats.target_forwards for run in runs)
        same = sum(got == ref for got, ref in zip(made[name], reference, strict=True))
        same_alone = sum(got == ref for got, ref in zip(made[name], alone, strict=True))
        notes = [f"prompt {i}: sharded {gaps(target, p, got) or '-'}, alone {gaps(whole, p, got) or '-'}"
                 for i, (p, got) in enumerate(zip(texts, made[name], strict=True)) if got != alone[i]]  # fmt: skip
        if not getattr(strategy, "exact", True):
            notes = ["not exact by design"]
        say(f"{name:18} {sum(map(len, made[name])) / forwards:14.2f}  {same:>7}/{len(texts)}  "
            f"{same_alone:>13}/{len(texts)}    {'; '.join(notes) or '-'}", flush=True)  # fmt: skip
    everyone = distributed.gathered(made)
    say(f"\nevery rank decoded the same tokens: {all(other == everyone[0] for other in everyone)}")
    return 0


if __name__ == "__main__":
    torch.set_grad_enabled(False)
    sys.exit(main())
