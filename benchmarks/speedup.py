"""Speed-up of strategies over greedy `Autoregressive` on the default model, measured side by side.

Each prompt is decoded by the baseline and by every contender, in an order that rotates
from prompt to prompt, in one process; the ratio of summed times is the speed-up. Also
printed: tokens per target forward and whether the output equals greedy's. Generation
stops at the model's end-of-turn token or after `--new-tokens`.

Contenders are strategy names from `mtdecode.strategies.REGISTRY` (a strategy with a draft
runs once per `--draft-tokens` value), plus:

- `lookahead-paper`: `Lookahead(7, 5, 7, prompt_pool=False)`, the paper's README defaults (tuned for an A100);
- `lookahead-prompt`, `lookahead-no-prompt`: the tuned `Lookahead` with and without its pool seeded
  from the prompt;
- `hf-prompt-lookup`: transformers' own `generate(prompt_lookup_num_tokens=10)`.

    python benchmarks/speedup.py [--strategies speculative] [--draft-tokens 2 3 4] [--prompts chat code]
                                 [--rounds 2] [--new-tokens 96]
"""

import argparse

from tqdm import tqdm

import mtdecode
from mtdecode.bench import (
    HF_PROMPT_LOOKUP_TOKENS,
    TABLE_HEADER,
    Contender,
    hf_contender,
    race,
    rows_for,
    strategy_contender,
    table,
)
from mtdecode.demo import print_table
from mtdecode.policy import report
from mtdecode.strategies import REGISTRY, Autoregressive, Lookahead, needs_draft

CHAT = [
    "Explain how a refrigerator keeps food cold.",
    "Write a short story about a robot who learns to paint.",
    "What are the main differences between Python lists and tuples?",
    "Give me a packing list for a weekend hiking trip.",
    "Describe the water cycle in simple terms.",
    "Write a haiku about autumn and explain its imagery.",
]
_CODE = {
    "Rename the variable `total` to `running_sum` in this function and show the whole function:": """
def average(values):
    total = 0
    count = 0
    for value in values:
        total += value
        count += 1
    if count == 0:
        return 0
    return total / count
""",
    "Add type hints to this Python function and show the whole function:": """
def merge_counts(first, second):
    merged = dict(first)
    for key, value in second.items():
        merged[key] = merged.get(key, 0) + value
    return merged
""",
    "Add a docstring to this class and show the whole class:": """
class Stack:
    def __init__(self):
        self.items = []

    def push(self, item):
        self.items.append(item)

    def pop(self):
        return self.items.pop()

    def is_empty(self):
        return len(self.items) == 0
""",
    "Rewrite this loop as a list comprehension and show the whole function:": """
def squares_of_evens(numbers):
    result = []
    for n in numbers:
        if n % 2 == 0:
            result.append(n * n)
    return result
""",
}
CODE = [f"{task}\n```python{code}```" for task, code in _CODE.items()]
PROMPT_SETS = {"chat": CHAT, "code": CODE}


def contenders_for(names: list[str], draft_tokens: list[int], model, settings: dict) -> dict[str, Contender]:
    draft = None
    chosen = {"autoregressive": strategy_contender(model, Autoregressive(), **settings)}
    for name in names:
        if name == "hf-prompt-lookup":
            chosen[name] = hf_contender(model, prompt_lookup_num_tokens=HF_PROMPT_LOOKUP_TOKENS, **settings)
        elif name == "lookahead-paper":
            chosen[name] = strategy_contender(model, Lookahead(7, 5, 7, prompt_pool=False), **settings)
        elif name == "lookahead-prompt":
            chosen[name] = strategy_contender(model, Lookahead(prompt_pool=True), **settings)
        elif name == "lookahead-no-prompt":
            chosen[name] = strategy_contender(model, Lookahead(prompt_pool=False), **settings)
        elif needs_draft(REGISTRY[name]):
            draft = draft or mtdecode.load_model(mtdecode.DRAFT_MODEL)
            for k in draft_tokens:
                strategy = REGISTRY[name](draft=draft, num_draft_tokens=k)
                chosen[f"{name} (k={k})"] = strategy_contender(model, strategy, **settings)
        else:
            chosen[name] = strategy_contender(model, REGISTRY[name](), **settings)
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    choices = [n for n in REGISTRY if n != "autoregressive"] + [
        "lookahead-paper",
        "lookahead-prompt",
        "lookahead-no-prompt",
        "hf-prompt-lookup",
    ]
    parser.add_argument(
        "--strategies", nargs="+", default=[n for n in REGISTRY if n != "autoregressive"], choices=choices
    )
    parser.add_argument("--prompts", nargs="+", default=["chat"], choices=list(PROMPT_SETS))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--draft-tokens", type=int, nargs="+", default=[4], help="guesses per step to compare")
    args = parser.parse_args()

    model, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
    settings = dict(max_new_tokens=args.new_tokens, eos_token_id=tokenizer.eos_token_id)
    contenders = contenders_for(args.strategies, args.draft_tokens, model, settings)
    for set_name in args.prompts:
        prompts = [
            tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)["input_ids"]
            for p in PROMPT_SETS[set_name]
        ]
        for contender in contenders.values():  # warm-up (and lookahead's one-off measurement of its forwards)
            contender(prompts[0][:8])
        if any(name.startswith("lookahead") for name in contenders):
            for line in report.explain(model):
                print(f"tuned in this process: {line}")
        with tqdm(total=args.rounds * len(prompts) * len(contenders), desc="interleaved runs", unit="run") as bar:
            tallies = race(contenders, prompts * args.rounds, lambda _: bar.update())
        exact = {name: getattr(REGISTRY.get(name.split(" ")[0]), "exact", True) for name in contenders}
        print(
            f"\n{set_name} prompts: {args.rounds} x {len(prompts)} runs, at most {args.new_tokens} new tokens, "
            "greedy, interleaved"
        )
        print_table(("strategy", *TABLE_HEADER[2:]), [row[1:] for row in table(rows_for(set_name, tallies, exact))])


if __name__ == "__main__":
    main()
