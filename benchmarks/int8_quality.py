"""How different the int8 model is from float32, on the benchmark's prompts.

`load_model(quantize="int8")` is a different model. For every prompt of `mtdecode bench`'s suite
(all four tasks), float32 greedy decoding writes an answer; then

- agreement: the share of the answer's positions where the int8 model's argmax (fed the same
  float32 text, teacher-forced) is float32's token;
- perplexity of that answer under float32 and under int8;
- identical: how many int8 greedy answers equal float32's token for token, and the mean
  length of the common prefix.

    python benchmarks/int8_quality.py [--prompts-per-task 8] [--new-tokens 64]
"""

import argparse
import math

import torch

import mtdecode
from mtdecode.bench import cpu_model, load_suite
from mtdecode.strategies import Autoregressive


@torch.no_grad()
def answer_logits(model: mtdecode.CausalLM, prompt: list[int], answer: list[int]) -> torch.Tensor:
    """Logits predicting each answer token, from one forward over prompt + answer."""
    ids = torch.tensor([prompt + answer])
    logits = model.hf(ids).logits[0, len(prompt) - 1 : -1].double()  # (answer, vocab)
    return logits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts-per-task", type=int, default=8)
    parser.add_argument("--new-tokens", type=int, default=64)
    args = parser.parse_args()
    tokenizer = mtdecode.load_tokenizer()
    models = {"float32": mtdecode.load_model(), "int8": mtdecode.load_model(quantize="int8")}
    eos = tokenizer.eos_token_id
    print(f"{cpu_model()}, {torch.get_num_threads()} threads")
    totals = {"positions": 0, "agree": 0, "nll float32": 0.0, "nll int8": 0.0, "identical": 0, "prefix": 0, "runs": 0}
    for task, spec in load_suite()["tasks"].items():
        for messages in spec["prompts"][: args.prompts_per_task]:
            prompt = list(tokenizer.apply_chat_template(messages, add_generation_prompt=True)["input_ids"])
            settings = dict(max_new_tokens=args.new_tokens, eos_token_id=eos)
            answers = {
                name: mtdecode.generate(m, prompt, Autoregressive(), **settings).tokens[0].tolist()
                for name, m in models.items()
            }
            reference = answers["float32"]
            logits = {name: answer_logits(m, prompt, reference) for name, m in models.items()}
            target = torch.tensor(reference)
            totals["positions"] += len(reference)
            totals["agree"] += int((logits["int8"].argmax(-1) == target).sum())
            for name in models:
                nll = -torch.log_softmax(logits[name], -1).gather(1, target[:, None]).sum()
                totals[f"nll {name}"] += float(nll)
            same = 0
            for a, b in zip(reference, answers["int8"], strict=False):
                if a != b:
                    break
                same += 1
            totals["identical"] += answers["int8"] == reference
            totals["prefix"] += same
            totals["runs"] += 1
        print(f"  {task}: done")
    n = totals["positions"]
    print(
        f"{totals['runs']} prompts, {n} answer tokens (float32 greedy, at most {args.new_tokens} each)\n"
        f"int8 argmax agrees with float32's token at {totals['agree'] / n:.1%} of positions (teacher-forced)\n"
        f"perplexity of float32's answers: float32 {math.exp(totals['nll float32'] / n):.3f}, "
        f"int8 {math.exp(totals['nll int8'] / n):.3f}\n"
        f"int8 greedy answers identical to float32's: {totals['identical']}/{totals['runs']}; "
        f"mean common prefix {totals['prefix'] / totals['runs']:.1f} tokens"
    )


if __name__ == "__main__":
    main()
