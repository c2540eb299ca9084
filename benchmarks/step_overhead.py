"""Where a strategy's time goes besides the target's forwards: the bookkeeping per step.

Decodes the first 3 chat and 3 code-editing prompts of the benchmark suite (greedy, at most 64
new tokens) with each strategy, after a warm-up, and splits the wall-clock time into the
target model's forwards (`CausalLM.forward`, timed by wrapping it) and everything else:
verification, cache roll-back, pools, drafting rules, Python. Speculative decoding's draft
forwards also go through `CausalLM.forward` and count as forwards.

With `--resting`, the strategies that decide how many guesses to verify get costs under which no guess ever pays
(a forward over two tokens priced at 50 of one), so that every step drafts nothing: what a step at rest spends
beside greedy's, the rule's own bookkeeping.

    python benchmarks/step_overhead.py [--resting]
"""

import argparse
import time
import warnings

import mtdecode
from mtdecode import model as adapter
from mtdecode.bench import load_suite, tokenize
from mtdecode.costs import DraftCosts
from mtdecode.policy import Adaptive
from mtdecode.strategies import MTAD, Autoregressive, Jacobi, Lookahead, PromptLookup, Speculative

#: costs under which no guess pays: every step of a ruled strategy is a rest step
NEVER = DraftCosts(draft=5.0, target=[1.0] + [50.0] * 40)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resting", action="store_true", help="costs under which no guess pays: only rest steps")
    resting = parser.parse_args().resting
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
    if resting:
        warnings.simplefilter("ignore", mtdecode.GreedyFallbackWarning)  # decoding greedily is the point here
        strategies = {
            "autoregressive": Autoregressive(),
            "jacobi": Jacobi(policy=Adaptive(costs=NEVER, acceptance=0.0)),
            "prompt_lookup": PromptLookup(policy=Adaptive(costs=NEVER)),
            "speculative": Speculative(draft, policy=Adaptive(costs=NEVER, acceptance=0.0)),
            "mtad": MTAD(draft, policy=Adaptive(costs=NEVER, acceptance=0.0)),
        }
    else:
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
