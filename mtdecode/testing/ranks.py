"""Every strategy on a tensor-parallel target: what each rank of `torchrun` decodes for the tensor-parallel tests.

    torchrun --nproc-per-node 2 -m mtdecode.testing.ranks MODELS OUT

Each rank loads every model folder in MODELS (tiny float64 models of `tiny_model`'s families, saved with
`save_pretrained`; the folder's name is the family) sharded by transformers' own plan (`tp_plan="auto"`), with a
draft and a feature head that stay whole on every rank, and decodes with every strategy at fixed settings, greedy
and seeded (`runs`); on the first model also at every strategy's defaults, which measure this host's costs on first
use (measuring a second model's would show nothing new and double the launch's longest part). Before that,
with `torch.distributed` not yet started, the ranks share out the models and decode each with the whole model as a
single process does (`alone`). Each rank writes what it decoded to `OUT/rank{r}.json`, with what two deliberately
divergent calls raised (`divergent`) and, for the first model, the oracle's verdicts on a correct and a wrong
decoder (`oracle`). Then rank 0 waits on a barrier that rank 1 never reaches, so that the stack a hung rank prints
(`faulthandler`: after `--hang` seconds there, after `--timeout` seconds anywhere else) is seen to name the call it
waits in.
"""

import argparse
import faulthandler
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import AutoModelForCausalLM
from transformers.distributed import DistributedConfig

import mtdecode
from mtdecode.costs import DraftCosts
from mtdecode.distributed import RankMismatchError
from mtdecode.policy import Adaptive
from mtdecode.strategies import MMTAD, MTAD, Autoregressive, Eagle, Jacobi, Lookahead, PromptLookup, Speculative
from mtdecode.testing.blackbox import check_greedy
from mtdecode.testing.decoders import strategy_decoder
from mtdecode.testing.models import random_head, tiny_model
from mtdecode.testing.mutants import cache_rollback_off_by_one

#: a prompt that repeats itself (so that prompt lookup and lookahead find copies), and a ragged batch
PROMPT = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
BATCH = [[1, 2, 3, 4, 5], [6, 7]]
NEW_TOKENS = 16
#: the sampled runs' settings and seed
SAMPLED = dict(temperature=1.0, top_k=20, seed=7)
#: what a deliberately hung rank waits on: its stack names this
HANG = "wait_for_a_rank_that_never_comes"


def runs(draft, head, *, defaults: bool) -> dict[str, object]:
    """name -> strategy: greedy decoding, every strategy at fixed settings (`fixed`) and, with `defaults`, every
    strategy at its defaults."""
    at_defaults = {
        "defaults/speculative": Speculative(draft),
        "defaults/jacobi": Jacobi(),
        "defaults/prompt_lookup": PromptLookup(),
        "defaults/lookahead": Lookahead(),
        "defaults/eagle": Eagle(head),
        "defaults/mtad": MTAD(draft),
        "defaults/mmtad": MMTAD(draft),
    }
    return {"defaults/autoregressive": Autoregressive(), **(at_defaults if defaults else {}), **fixed(draft, head)}


def fixed(draft, head) -> dict[str, object]:
    """name -> strategy at fixed settings: the same forwards on any host, sharded or not."""
    return {
        "fixed/speculative": Speculative(draft, 3),
        "fixed/jacobi": Jacobi(4),
        "fixed/prompt_lookup": PromptLookup(num_draft_tokens=3),
        "fixed/lookahead": Lookahead(3, 3, 3),
        "fixed/eagle": Eagle(head, tree_size=6),
        "fixed/mtad": MTAD(draft, 3),
        "fixed/mmtad": MMTAD(draft, 3),
    }


def helpers(family: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """The draft (another family's tiny model, same vocabulary) and a random feature head for the tiny target of
    `family` as `tiny_model(family, seed=3)` makes it; both whole, the same on every rank and in a single process."""
    other = "qwen2" if family == "llama" else "llama"
    return tiny_model(other, seed=5), random_head(tiny_model(family, seed=3))


def decode(model, strategies: dict[str, object]) -> dict[str, list]:
    """name/greedy and name/sampled -> each row's tokens, for the single prompt (greedy) and the batch (sampled)."""
    out = {}
    for name, strategy in strategies.items():
        out[f"{name}/greedy"] = mtdecode.generate(model, PROMPT, strategy, max_new_tokens=NEW_TOKENS).tokens.tolist()
        sampled = mtdecode.generate(model, BATCH, strategy, max_new_tokens=NEW_TOKENS, **SAMPLED)
        out[f"{name}/sampled"] = sampled.tokens.tolist()
    return out


def alone(folder: Path) -> dict[str, list]:
    """What a single process decodes with the whole model at fixed settings, as `decode` names it: the ranks run
    this, each for its share of the models, before `torch.distributed` starts (the sharded load starts it)."""
    if dist.is_initialized():
        raise RuntimeError("a single process's runs must come before the sharded load starts torch.distributed")
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64).eval()
    draft, head = helpers(folder.name)
    return decode(model, runs(draft, head, defaults=False))


def divergent(model, draft) -> dict[str, str]:
    """What two calls that differ by rank raise: a seed per rank (caught on entry), and costs per rank, which make
    the ranks draft differently (caught at the first forward whose shape differs)."""
    rank, raised = dist.get_rank(), {}
    costs = DraftCosts(0.01 if rank == 0 else 5.0, [1.0] * 6)  # rank 0 drafts, rank 1 finds no guess worth it
    calls = {
        "seed": lambda: mtdecode.generate(model, PROMPT, Autoregressive(), temperature=1.0, seed=rank),
        "costs": lambda: mtdecode.generate(model, PROMPT, Speculative(draft, policy=Adaptive(costs, 0.9))),
    }
    for what, call in calls.items():
        try:
            call()
            raised[what] = ""
        except RankMismatchError as error:
            raised[what] = str(error)
    return raised


def oracle(model) -> dict[str, bool]:
    """Whether the oracle passes a correct decoder and a wrong one (a cache cropped one entry short after a
    rejection), judged against greedy decoding on the same sharded model (`check_greedy(model=...)`)."""
    correct = strategy_decoder(PromptLookup(num_draft_tokens=3))
    decoders = {"correct": correct, "cache_rollback_off_by_one": cache_rollback_off_by_one}
    return {name: check_greedy(wrong_or_not, model=model, examples=3, max_prompt=40).passed
            for name, wrong_or_not in decoders.items()}  # fmt: skip


def wait_for_a_rank_that_never_comes(seconds: float) -> None:
    """Rank 0 waits on a barrier that rank 1, asleep, never reaches: rank 0 hangs until `faulthandler` prints its
    stack and ends it after `seconds`, and `torchrun` then ends rank 1."""
    if dist.get_rank() == 0:
        faulthandler.dump_traceback_later(seconds, exit=True)
        dist.barrier()
    faulthandler.cancel_dump_traceback_later()  # rank 1 lives on until torchrun ends it, after rank 0
    time.sleep(seconds + 60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds before a hung rank prints its stack")
    parser.add_argument("--hang", type=float, default=3.0, help="seconds that the deliberate hang lasts")
    args = parser.parse_args()
    faulthandler.dump_traceback_later(args.timeout, exit=True)  # a hang ends with every thread's stack
    folders = sorted(args.models.iterdir())
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])  # set by torchrun
    results = {folder.name: {} for folder in folders}
    for folder in folders[rank::world]:  # this rank's share, before torch.distributed starts
        results[folder.name]["alone"] = alone(folder)
    for folder in folders:
        plan = DistributedConfig(tp_plan="auto")
        model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float64, distributed_config=plan).eval()
        draft, head = helpers(folder.name)
        strategies = runs(draft, head, defaults=folder == folders[0])
        results[folder.name] |= {"runs": decode(model, strategies), "divergent": divergent(model, draft)}
        if folder == folders[0]:  # one family is enough for the oracle
            results[folder.name]["oracle"] = oracle(model)
    (args.out / f"rank{rank}.json").write_text(json.dumps(results))
    print(f"rank {rank}: done", file=sys.stderr, flush=True)
    wait_for_a_rank_that_never_comes(args.hang)


if __name__ == "__main__":
    main()
