"""Where a strategy's time goes besides the target's forwards: the bookkeeping per step.

Decodes the first 3 chat and 3 code-editing prompts of the benchmark suite (greedy, at most 64
new tokens) with each strategy, after a warm-up, and splits the wall-clock time into the
target model's forwards (`CausalLM.forward`, timed by wrapping it) and everything else:
verification, cache roll-back, pools, drafting rules, Python. Speculative decoding's draft
forwards also go through `CausalLM.forward` and count as forwards.

    python benchmarks/step_overhead.py
"""

import time

import mtdecode
from mtdecode import model as adapter
from mtdecode.bench import load_suite, tokenize
from mtdecode.strategies import MTAD, Autoregressive, Lookahead, PromptLookup, Speculative


def main() -> None:
    target, draft = mtdecode.load_model(), mtdecode.load_model(mtdecode.DRAFT_MODEL)
    tokenizer = mtdecode.load_tokenizer()
    tasks = load_suite()["tasks"]
    prompts = [tokenize(tokenizer, m) for m in tasks["chat"]["prompts"][:3] + tasks["code"]["prompts"][:3]]
    spent, calls = [0.0], [0]
    forward = adapter.CausalLM.forward

    def timed(self, *args, **kwargs):
        start = time.perf_counter()
        out = forward(self, *args, **kwargs)
        spent[0] += time.perf_counter() - start
        calls[0] += 1
        return out

    adapter.CausalLM.forward = timed
    strategies = {
        "autoregressive": Autoregressive(),
        "lookahead(3,2,3)": Lookahead(3, 2, 3),  # a setting, not the greedy fallback this host may choose
        "prompt_lookup": PromptLookup(),
        "speculative": Speculative(draft),
        "mtad": MTAD(draft),
    }
    settings = dict(max_new_tokens=64, eos_token_id=tokenizer.eos_token_id, seed=0)
    for strategy in strategies.values():  # warm-up (and the one-off cost measurements)
        mtdecode.generate(target, prompts[0], strategy, **{**settings, "max_new_tokens": 8})
    print("strategy          total s  forwards s  calls  other s  other ms per forward call")
    for name, strategy in strategies.items():
        spent[0], calls[0] = 0.0, 0
        start = time.perf_counter()
        for prompt in prompts:
            mtdecode.generate(target, prompt, strategy, **settings)
        total = time.perf_counter() - start
        other = total - spent[0]
        print(f"{name:16}  {total:7.2f}  {spent[0]:10.2f}  {calls[0]:5}  {other:7.2f}  {1000 * other / calls[0]:6.1f}")
    adapter.CausalLM.forward = forward


if __name__ == "__main__":
    main()
