"""What a drafting policy chose over a run, worded for `Stats.choices`."""

from collections.abc import Sequence

from mtdecode.costs import curves, timing
from mtdecode.model import CausalLM
from mtdecode.policy import search
from mtdecode.policy.batch import BatchRule
from mtdecode.policy.rule import Rule
from mtdecode.session import Choice, Step


def drafting_choice(
    strategy: str, rule: Rule, steps: Sequence[Step], *, guesses: str, pays: str, fix: str, fallback: bool = True
) -> Choice:
    """What `rule` chose over a run, for `Stats.choices`: how many `guesses` (e.g. "guesses", "copied tokens") the
    row `steps` that drafted verified on average, and how many row steps drafted nothing because no guess paid.

    **Arguments:**

    - `strategy`: the strategy's name; `rule`: its `Rule`; `steps`: every row step of the run.
    - `pays`: the rule's break-even, worded to follow "because" (e.g. "the row's acceptance stayed below 62%").
    - `fix`: how to fix the number of guesses instead of leaving it to the rule.
    - `fallback`: whether a run with no drafting step decoded greedily (False for a strategy that does other work
      besides its guesses, such as lookahead's window).

    **Returns:** a `Choice`; when no row step drafted and the rule stopped at least one, the run decoded greedily
    because of the rule, and the choice says so (`Choice.greedy`, with `fix` as the way out).
    """
    drafting = [step.drafted for step in steps if step.drafted > 0]
    declined = int(rule.declined)
    if fallback and not drafting and declined:
        reason = f"{declined} of its {len(steps)} row steps drafted nothing because {pays}; {fix}"
        return Choice(strategy, "decodes greedily", reason, greedy=True)
    mean = sum(drafting) / len(drafting) if drafting else 0.0
    setting = f"{mean:.1f} {guesses} verified per drafting step ({len(drafting)} of {len(steps)} row steps drafted)"
    return Choice(strategy, setting, f"{declined} row steps drafted nothing because {pays}")


def rule_choice(name: str, length: Rule, steps: list[Step], *, drafting: str = "a draft forward") -> Choice:
    """What the stopping rule chose over the run (`Stats.choices`), with its break-even: a first guess pays only
    while the row's acceptance a exceeds (c + t(2) - t(1)) / t(1) (the rule with i = 0); where a batch that starts
    rested (`BatchRule`'s `wait_first`) never drafted, the try that must pay for the draft's reading of the prompts.
    `drafting` names what c pays for (MTAD: a depth of its beams)."""
    c = length.costs
    added = c.t(2) - c.t(1)
    pays = (
        f"the row's acceptance so far was below the {(c.draft + added) / c.step(0):.0%} at which a first guess "
        f"pays ({drafting} costs {c.draft:.2f} of a 1-token target forward, one more verified token {added:.2f})"
    )
    if (
        isinstance(length, BatchRule) and length.waiting
    ):  # a batch that never drafted: its first drafting step must be a try (`wait_first`)
        pays = (
            f"the batch starts rested and no try paid or was due: a try of a guess a row must pay for the draft's "
            f"reading of the prompts ({length.asked:.2f} of a 1-token target forward; {drafting} "
            f"{c.draft:.2f}) at an optimistic {float(length.calibration.optimistic()[0]):.0%} acceptance"
        )
    fix = f"{name}(draft, num_draft_tokens=k) drafts k guesses every step"
    return drafting_choice(name, length, steps, guesses="guesses", pays=pays, fix=fix)


def copy_choice(name: str, length: Rule, steps: list[Step]) -> Choice:
    """What the rule chose over the run (`Stats.choices`), with its break-even: verifying a copy's first token pays
    only while its chance of acceptance exceeds r (t(2) - t(1)), r the row's rate so far (`Rule.plan`)."""
    added = length.costs.t(2) - length.costs.t(1)
    pays = (
        f"no prefix of the copy was expected to pay for its tokens in the forward (one more verified token costs "
        f"{added:.2f} of a 1-token forward, weighed at the row's tokens per unit of cost so far)"
    )
    fix = f"{name}(num_draft_tokens=k) verifies up to k copied tokens every step"
    return drafting_choice(name, length, steps, guesses="copied tokens", pays=pays, fix=fix)


def block_choice(rule: Rule, steps: list[Step]) -> Choice:
    """What the rule chose over the run (`Stats.choices`): how many guesses the steps verified, and how many row
    steps verified none because none was expected to pay for its place in the forward."""
    added = rule.costs.t(2) - rule.costs.t(1)
    pays = (
        f"no guess was expected to pay for its place in the forward (one more verified token costs {added:.2f} of a "
        "1-token forward; by how often guesses at each place of the block were accepted so far)"
    )
    fix = "Jacobi(block=b) verifies b guesses every step"
    return drafting_choice("Jacobi", rule, steps, guesses="guesses", pays=pays, fix=fix)


def candidate_choice(rule: Rule, ngram: int, steps: list[Step]) -> Choice:
    """What the candidate rule chose over the run (`Stats.choices`): how many candidates the steps verified, and how
    many row steps verified none of the pool's candidates because none was expected to pay for its tokens. The
    window still runs in those steps, so the run is never called greedy on this account."""
    pays = (
        f"no candidate was expected to pay for its {ngram - 1} tokens in the forward (by how often the row's "
        "candidates of each rank were accepted so far)"
    )
    fix = "Lookahead(W, N, G) with G given verifies every candidate found, up to G"
    return drafting_choice("Lookahead", rule, steps, guesses="candidates", pays=pays, fix=fix, fallback=False)


def tree_choice(size: Rule, depth_cost: float, steps: list[Step]) -> Choice:
    """What the tree-size rule chose over the run (`Stats.choices`), with what it weighs: a node is verified only
    while its chance of acceptance pays for its place in the target forward at the row's rate so far, and a depth
    is grown only while its nodes' chances pay for one more head forward (`depth_cost`)."""
    added = size.costs.step(1) - size.costs.step(0)
    o = size.costs.overhead
    beside = f", {o:.2f} of it the drafting step's work beside the forward" if o else ""
    pays = (
        f"no node's chance of acceptance paid for its place in the forward (a step's first verified node costs "
        f"{added:.2f} of a 1-token forward{beside}, weighed at the row's tokens per unit of cost so far; a depth of "
        f"the tree costs {depth_cost:.2f})"
    )
    fix = "Eagle(tree_size=N) verifies the N best nodes every step"
    return drafting_choice("Eagle", size, steps, guesses="nodes", pays=pays, fix=fix)


def explain(model: CausalLM, draft: CausalLM | None = None) -> list[str]:
    """One line per tuned strategy: what it chose on this host and why (printed by `mtdecode bench`)."""
    costs = timing.forward_costs(model)
    curve = ", ".join(f"{n}: {curves.relative_cost(costs, n):.2f}x" for n in (2, 4, 8, 16))
    lines = [f"forward over n tokens against 1 token on this host: {curve}"]
    for pool in (False, True):
        choice = search.lookahead_plan(model, None, None, None, prompt_pool=pool)[1]
        lines.append(f"Lookahead(prompt_pool={pool}): {choice.setting}: {choice.reason}")
    copy = curves.copy_costs(model, longest=11)
    cheapest = min(range(2, 12), key=copy.t)
    lines.append(
        f"PromptLookup: weighs each step's copied tokens against this curve and the row's rate so far; "
        f"verifying 10 costs {copy.t(11):.2f}x one token, and {cheapest - 1} cost the least, {copy.t(cheapest):.2f}x"
    )
    if draft is not None:
        c = curves.draft_costs(model, draft)
        break_even = c.step(1) - c.step(0)
        lines.append(
            f"Speculative/MTAD: a draft forward costs {c.draft:.2f} of a target forward, one more verified token "
            f"{c.t(2) - c.t(1):.2f}, a step's bookkeeping {c.overhead:.2f}; a first guess pays only if the draft is "
            f"accepted more than {break_even:.0%} of the time (rows whose acceptance falls below decode greedily)"
        )
    return lines
