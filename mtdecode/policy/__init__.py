"""How much to guess: the drafting policy that a strategy is handed.

A strategy's `decode` is its paper's algorithm. How many guesses a step drafts and verifies, and whether it drafts at
all, is a policy's decision, which the strategy asks for at a few fixed points of its loop. For a chain of guesses
(`Speculative`, `MTAD`):

    plan = policy.chain(s, draft, most=...)       # once per run
    while not s.done:
        if plan.rests(rows, unread): plain step   # before drafting
        going = plan.first(rows, unread)          # which rows draft a first guess
        ... going = plan.more(going, confidence)  # after each guess
        plan.record(drafted, accepted)            # after verifying

- `Fixed(k)` is the paper's own setting: k guesses every step. It measures nothing and keeps nothing, so a run with
  it makes the same forwards on any host and on every rank.
- `Adaptive()` is mtdecode's rule (`mtdecode.policy.rule`): a guess is drafted while it is expected to pay for its
  cost, weighed on costs and acceptance measured on this host (or given), calibrated on the run's own verified
  guesses, with rests and tries when guesses stop paying. It never reads this step's p, so the output stays exact.
"""

from mtdecode.plans import ChainPlan, TreePlan
from mtdecode.policy.adaptive import Adaptive
from mtdecode.policy.fixed import Fixed

__all__ = ["Adaptive", "ChainPlan", "Fixed", "TreePlan", "fixed_or"]


def fixed_or(k: int | None, policy: Adaptive | Fixed) -> Adaptive | Fixed:
    """`Fixed(k)` where a strategy was given the paper's k, else its `policy`."""
    return policy if k is None else Fixed(k)
