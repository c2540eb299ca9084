"""MTAD and MMTAD on the default model: perplexity of their answers and their speed, against token-by-token and
speculative sampling.

Held-out chat prompts (`mtdecode.recipes.prompts.held_out_prompts`, which neither the draft nor the head was trained
on) are answered by `Autoregressive` sampling, `Speculative` sampling, `MTAD` and `MMTAD` with the shipped distilled
draft as q, and `MTAD` and `MMTAD` with the shipped EAGLE head as q (no second model), all with the same Sampler (by
default the public MTAD evaluation's: temperature 1, top-k 10, top-p 0.9). Each prompt is answered once per
contender with its own seed, the contenders back to back in a rotating order (interleaved). Perplexity is
exp(-mean log p) of the generated tokens under the target's untempered distribution, pooled over the answers (as in
Qin et al.), with a 95% bootstrap interval over the answers, and its ratio to token-by-token sampling's with a paired
95% interval (the same prompts resampled for both). Speed-ups are ratios of tokens per second measured in
the same process; CPU milliseconds per token stand in for the paper's energy per token.

    python benchmarks/mtad_quality.py [--answers 96] [--new-tokens 64] [--threshold 0.5] [--draft-tokens 4]
"""

import argparse
import json
import math
import os
import time
from pathlib import Path

import torch
from tqdm import tqdm

import mtdecode
from mtdecode.demo import print_table
from mtdecode.recipes.prompts import held_out_prompts
from mtdecode.strategies import MMTAD, MTAD, Autoregressive, Speculative
from mtdecode.zoo.eagle import shipped_head


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
    parser.add_argument("--answers", type=int, default=96, help="held-out prompts, each answered once")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top-k", type=int, default=10)
    parser.add_argument("--top-p", type=float, default=0.9)
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--draft-tokens", type=int, default=4)
    parser.add_argument("--beam-width", type=int, default=4)
    parser.add_argument("--json", help="also write every answer's log p, tokens, seconds and forwards to this file")
    args = parser.parse_args()

    model, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
    draft, head = mtdecode.load_model(mtdecode.DRAFT_MODEL), shipped_head(model)
    k, width, tau = args.draft_tokens, args.beam_width, args.threshold
    contenders = {
        "autoregressive": Autoregressive(),
        f"speculative (k={k})": Speculative(draft, k),
        f"mtad (k={k}, W={width}, tau={tau})": MTAD(draft, k, width, tau),
        f"mmtad (k={k}, W={width}, tau={tau})": MMTAD(draft, k, width, tau),
        f"mtad, head as q (k={k}, W={width}, tau={tau})": MTAD(head, k, width, tau),
        f"mmtad, head as q (k={k}, W={width}, tau={tau})": MMTAD(head, k, width, tau),
    }
    chat = held_out_prompts()
    if not 1 <= args.answers <= len(chat):
        raise SystemExit(f"--answers must be between 1 and {len(chat)} (the held-out chat prompts)")
    prompts = [
        tokenizer.apply_chat_template([{"role": "user", "content": chat[i * len(chat) // args.answers]}],
                                      add_generation_prompt=True)["input_ids"]
        for i in range(args.answers)
    ]  # fmt: skip
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
    seconds, cpu, energy, forwards = (dict.fromkeys(names, 0.0) for _ in range(4))
    rapl = rapl_counters()
    answers: dict[str, list[tuple[float, int]]] = {name: [] for name in names}  # (sum of log p, tokens) per answer
    for i in tqdm(range(len(prompts)), desc="interleaved answers", unit="prompt"):
        shift = i % len(names)
        for name in names[shift:] + names[:shift]:  # rotate who goes first
            start, start_cpu, start_energy = time.perf_counter(), time.process_time(), rapl_joules(rapl)
            result = mtdecode.generate(model, prompts[i], contenders[name], **settings, seed=i)
            seconds[name] += time.perf_counter() - start
            cpu[name] += time.process_time() - start_cpu
            energy[name] += rapl_joules(rapl, start_energy) if rapl else 0.0
            answer = result.tokens[0].tolist()
            forwards[name] += result.stats.target_forwards
            answers[name].append((log_likelihood(model, prompts[i], answer), len(answer)))

    tokens = {name: sum(n for _, n in answers[name]) for name in names}
    speed = {name: tokens[name] / seconds[name] for name in names}
    rows = []
    for name in names:
        low, high = perplexity_interval(answers[name])
        ratio_low, ratio_high = perplexity_interval(answers[name], answers[names[0]])
        rows.append((
            name,
            f"{perplexity(answers[name]):.2f} [{low:.2f}, {high:.2f}]",
            f"{perplexity(answers[name]) / perplexity(answers[names[0]]):.3f} [{ratio_low:.3f}, {ratio_high:.3f}]",
            f"{speed[name]:.1f}",
            f"{speed[name] / speed[names[0]]:.2f}x",
            f"{speed[name] / speed[names[1]]:.2f}x",
            f"{tokens[name] / forwards[name]:.2f}",
            f"{energy[name] / tokens[name]:.2f}" if rapl else f"{1000 * cpu[name] / tokens[name]:.0f}",
        ))  # fmt: skip
    print(
        f"\n{len(prompts)} answers per strategy, at most {args.new_tokens} new tokens each; temperature "
        f"{args.temperature}, top-k {args.top_k}, top-p {args.top_p}; interleaved. Perplexity with its 95% interval "
        f"(bootstrap over answers) and its ratio to autoregressive's (paired bootstrap over prompts). "
        + ("Energy: the CPU packages' RAPL counters." if rapl else
           "Energy: CPU milliseconds per token, a stand-in for joules (no readable RAPL counters).")
    )  # fmt: skip
    header = ("strategy", "perplexity [95%]", "/ autoregressive's [95%]", "tokens/s", "vs autoregressive",
              "vs speculative", "tokens/target forward", "J/token" if rapl else "CPU ms/token")  # fmt: skip
    print_table(header, rows)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"settings": vars(args), "answers": answers, "seconds": seconds, "cpu": cpu, "joules": energy,
                       "rapl": bool(rapl), "forwards": forwards}, out, indent=1)  # fmt: skip


def rapl_counters() -> list[Path]:
    """The energy counters of the CPU packages (RAPL, `/sys/class/powercap/intel-rapl:N/energy_uj`; AMD's appear
    there too) that this process can read; none on hosts without them or without the permission."""
    found = sorted(Path("/sys/class/powercap").glob("intel-rapl:[0-9]/energy_uj"))
    return [path for path in found if os.access(path, os.R_OK)]


def rapl_joules(counters: list[Path], before: list[int] | None = None) -> list[int] | float:
    """The counters' readings in microjoules, or, given earlier `before` readings, the joules spent since (a counter
    that wrapped around at its `max_energy_range_uj` counted once around)."""
    now = [int(path.read_text()) for path in counters]
    if before is None:
        return now
    ranges = [int((path.parent / "max_energy_range_uj").read_text()) for path in counters]
    return sum((b - a) % r for a, b, r in zip(before, now, ranges, strict=True)) / 1e6


def perplexity(answers: list[tuple[float, int]]) -> float:
    """exp(-mean log p) over every generated token of the answers, pooled (as in Qin et al.)."""
    return math.exp(-sum(log_p for log_p, _ in answers) / sum(n for _, n in answers))


def perplexity_interval(
    answers: list[tuple[float, int]], baseline: list[tuple[float, int]] | None = None, resamples: int = 2000
) -> tuple[float, float]:
    """A 95% interval for the pooled perplexity, or, given the `baseline`'s answers to the same prompts, for the
    ratio of the two perplexities (paired: a bootstrap sample picks the same prompts for both, so what the prompts
    alone make likely cancels). The 2.5% and 97.5% quantiles over `resamples` bootstrap samples of the prompts
    (seeded: the interval repeats)."""
    generator = torch.Generator().manual_seed(0)
    picks = torch.randint(len(answers), (resamples, len(answers)), generator=generator)

    def pooled(group: list[tuple[float, int]]) -> torch.Tensor:  # each bootstrap sample's perplexity
        log_p = torch.tensor([value for value, _ in group], dtype=torch.float64)
        counts = torch.tensor([n for _, n in group], dtype=torch.float64)
        return torch.exp(-log_p[picks].sum(1) / counts[picks].sum(1).clamp(min=1))

    samples = pooled(answers) if baseline is None else pooled(answers) / pooled(baseline)
    low, high = torch.quantile(samples, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
    return low, high


if __name__ == "__main__":
    main()
