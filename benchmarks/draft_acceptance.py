"""Is a weak speculative speed-up the draft's fault or the strategy's? Per prompt, this prints the
shipped draft's teacher-forced greedy agreement with the target and the acceptance rate Speculative
(k=1) actually gets, and the same acceptance for the recipe's untrained starting point (copied layers).

    python benchmarks/draft_acceptance.py [--new-tokens 48]
"""

import argparse

import torch

import mtdecode
from mtdecode.recipes.distill import build_draft
from mtdecode.strategies import Autoregressive, Speculative

PROMPTS = [
    "Explain how a refrigerator keeps food cold.",
    "Explain glaciers to a ten-year-old.",
    "Write a Python function that returns the n-th Fibonacci number.",
]


def acceptance(target, draft, ids: list[int], new_tokens: int) -> float:
    stats = mtdecode.generate(target, ids, Speculative(draft, 1), max_new_tokens=new_tokens).stats
    return stats.accepted_per_position[0] / stats.drafted_per_position[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=48)
    args = parser.parse_args()
    target, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
    shipped = mtdecode.load_model(mtdecode.DRAFT_MODEL)
    untrained = build_draft(target.hf, shipped.hf.head_token_ids)
    untrained.freeze_head()
    print("prompt | teacher-forced agreement (shipped) | acceptance k=1 (shipped) | acceptance k=1 (untrained)")
    for text in PROMPTS:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True)
        ids = ids["input_ids"]
        answer = mtdecode.generate(target, ids, Autoregressive(), max_new_tokens=args.new_tokens).tokens[0].tolist()
        sequence = torch.tensor([ids + answer])
        with torch.no_grad():
            t = target.hf(sequence).logits[0, len(ids) - 1 : -1].argmax(-1)
            d = shipped.hf(sequence).logits[0, len(ids) - 1 : -1].argmax(-1)
        print(
            f"{text[:40]:40} | {(t == d).float().mean().item():.3f} | "
            f"{acceptance(target, shipped, ids, args.new_tokens):.3f} | "
            f"{acceptance(target, untrained, ids, args.new_tokens):.3f}"
        )


if __name__ == "__main__":
    main()
