"""MTAD and MMTAD on the default model: perplexity of their answers and their speed, against token-by-token and
speculative sampling.

The same chat prompts are answered by `Autoregressive` sampling, `Speculative` sampling, `MTAD`
and `MMTAD`, all with the same Sampler (by default the public MTAD evaluation's: temperature 1,
top-k 10, top-p 0.9) and the shipped distilled draft, in interleaved runs with seeds
0, 1, ... Perplexity is exp(-mean log p) of the generated tokens under the target's
untempered distribution, pooled over all runs (as in Qin et al.). Speed-ups are ratios of
tokens per second measured in the same process.

    python benchmarks/mtad_quality.py [--rounds 2] [--new-tokens 64] [--threshold 0.5] [--draft-tokens 4]
"""

import argparse
import math
import time

import torch
from tqdm import tqdm

import mtdecode
from mtdecode.demo import print_table
from mtdecode.strategies import MMTAD, MTAD, Autoregressive, Speculative

from speedup import CHAT


def log_likelihood(model, prompt: list[int], answer: list[int]) -> float:
    """Sum of log p(token | everything before it) over `answer`, under the untempered target."""
    if not answer:
        return 0.0
    ids = torch.tensor([prompt + answer], device=model.device)
    with torch.no_grad():
        logits = model.hf(ids).logits[0, len(prompt) - 1 : -1].double()  # (answer, vocab)
    return float(logits.log_softmax(-1).gather(-1, ids[0, len(prompt) :, None]).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--top-p", type=float, default=0.9)
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--draft-tokens", type=int, default=4)
    parser.add_argument("--beam-width", type=int, default=4)
    args = parser.parse_args()

    model, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
    draft = mtdecode.load_model(mtdecode.DRAFT_MODEL)
    contenders = {
        "autoregressive": Autoregressive(),
        f"speculative (k={args.draft_tokens})": Speculative(draft, args.draft_tokens),
        f"mtad (k={args.draft_tokens}, W={args.beam_width}, tau={args.threshold})": MTAD(
            draft, args.draft_tokens, args.beam_width, args.threshold
        ),
        f"mmtad (k={args.draft_tokens}, W={args.beam_width}, tau={args.threshold})": MMTAD(
            draft, args.draft_tokens, args.beam_width, args.threshold
        ),
    }
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True)["input_ids"]
        for p in CHAT
    ]
    settings = dict(
        max_new_tokens=args.new_tokens,
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        eos_token_id=tokenizer.eos_token_id,
    )
    for strategy in contenders.values():  # warm-up
        mtdecode.generate(model, prompts[0], strategy, **{**settings, "max_new_tokens": 4})

    names = list(contenders)
    seconds, tokens, forwards, log_p = (dict.fromkeys(names, 0.0) for _ in range(4))
    runs = [(r, i) for r in range(args.rounds) for i in range(len(prompts))]
    for r, i in tqdm(runs, desc="interleaved runs", unit="prompt"):
        shift = (r * len(prompts) + i) % len(names)
        for name in names[shift:] + names[:shift]:  # rotate who goes first
            start = time.perf_counter()
            result = mtdecode.generate(model, prompts[i], contenders[name], **settings, seed=r * len(prompts) + i)
            seconds[name] += time.perf_counter() - start
            answer = result.tokens[0].tolist()
            tokens[name] += len(answer)
            forwards[name] += result.stats.target_forwards
            log_p[name] += log_likelihood(model, prompts[i], answer)

    speed = {name: tokens[name] / seconds[name] for name in names}
    rows = [
        (
            name,
            f"{math.exp(-log_p[name] / tokens[name]):.2f}",
            f"{speed[name]:.1f}",
            f"{speed[name] / speed[names[0]]:.2f}x",
            f"{speed[name] / speed[names[1]]:.2f}x",
            f"{tokens[name] / forwards[name]:.2f}",
        )
        for name in names
    ]
    print(
        f"\n{len(runs)} runs x at most {args.new_tokens} new tokens; temperature {args.temperature}, "
        f"top-k {args.top_k}, top-p {args.top_p}; interleaved"
    )
    header = ("strategy", "perplexity", "tokens/s", "vs autoregressive", "vs speculative", "tokens/target forward")
    print_table(header, rows)


if __name__ == "__main__":
    main()
