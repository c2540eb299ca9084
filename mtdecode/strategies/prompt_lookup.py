"""Prompt-lookup decoding: the text so far is the draft model.

Saxena (2023), "Prompt lookup decoding"; transformers' `prompt_lookup_num_tokens`. When an
answer quotes its prompt (code editing, summaries, question answering over a document),
the tokens after the latest n-gram usually continue as they did the last time that
n-gram appeared. Per step, with x0 the newest committed token:

1. lookup: find the most recent earlier occurrence of the last `ngram` tokens in the prompt
   and the text so far (falling back to shorter n-grams down to 1) and copy the up to
   `num_draft_tokens` tokens that followed it;
2. verify: one target forward over [x0, copied tokens]; keep the longest accepted prefix
   and one token of the target's own (`mtdecode.verification`: exact greedy at
   temperature 0, exactly p when sampling).

With no match the step is a plain decoding step.

How many of the copied tokens to verify: by default the number with the best expected tokens
per unit of cost (`DraftLength.plan_expected` in `mtdecode.policy.rule`: copying costs nothing, but a target
forward over 11 tokens costs more than one over 1, by the curve measured on this host), judged
from how often this row's copied tokens were accepted so far after runs of agreeing tokens as long (`CopyRecord`,
starting from the rates measured over greedy's answers to the benchmark suite, `SUITE_RATES`);
at most `max_draft_tokens`. The rule never looks at p, so the output stays exact.
`num_draft_tokens=k` copies up to k instead. `result.stats.choices` says how many copied tokens
the rule verified per step and how many row steps left a copy unverified because it did not pay
(`copy_choice`); when every copy found was left so, the run decoded greedily and `generate` warns
(`GreedyFallbackWarning`).
"""

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from mtdecode import tuning
from mtdecode.copying import SUITE_RATES, CopyRecord, lookup_rows
from mtdecode.costs import BatchCosts, DraftCosts
from mtdecode.policy.report import drafting_choice
from mtdecode.policy.rule import DraftLength, expected_tokens
from mtdecode.session import Choice, Session, Step
from mtdecode.strategy import check_counts
from mtdecode.tensor_types import Bool, Float, Tensor
from mtdecode.verification import padded, verify_chain


@dataclass(frozen=True)
class PromptLookup:
    """Draft by copying what followed the last n-gram's previous occurrence; verify in one forward.

    **Arguments:**

    - `ngram`: the longest n-gram to match (at least 1); shorter ones are tried if it has no match.
    - `num_draft_tokens`: copy up to this many tokens per step (at least 1); None (the default): as
      many as pay (`mtdecode.policy.rule`), at most `max_draft_tokens`.
    - `max_draft_tokens`, `costs`: the most copied tokens when the rule decides, and the costs it
      weighs (`BatchCosts` or one row's `DraftCosts`, as in `Speculative`; None: the batch's forward-cost
      curve measured on this host).
    """

    ngram: int = 3
    num_draft_tokens: int | None = None
    max_draft_tokens: int = 10
    costs: DraftCosts | BatchCosts | None = None

    def __post_init__(self) -> None:
        check_counts(self, ("ngram", "num_draft_tokens", "max_draft_tokens"), optional=["num_draft_tokens"])

    def decode(self, s: Session) -> Iterator[list[Step]]:
        length = record = None
        if self.num_draft_tokens is None:
            costs = self.costs or tuning.batch_draft_costs(s.target.model, None, s.batch)
            length = DraftLength(costs, s.batch, s.device, remaining=lambda: s.remaining)
            record = CopyRecord(s.batch, SUITE_RATES)
            s.record_choice(lambda: copy_choice("PromptLookup", length, s.steps))  # for `Stats.choices`
        while not s.done:
            k = s.budget(self.num_draft_tokens or self.max_draft_tokens).tolist()  # the step adds one token
            copied, matched = lookup_rows(s.tokens, self.ngram, k)  # step 1
            if length is not None:
                copied = worth_verifying(copied, matched, length, record, s.active)
            steps, _, accepted = verify_chain(s, padded(copied, s.device))  # step 2
            if length is not None:
                drafted = torch.tensor([len(c) for c in copied], device="cpu")
                length.record(drafted.to(s.device), accepted)
                record.add(drafted, accepted.cpu(), matched)
            yield steps


def worth_verifying(
    copied: list[list[int]],
    matched: list[int],
    length: DraftLength,
    record: CopyRecord,
    rows: Bool[Tensor, " batch"],
) -> list[list[int]]:
    """The prefix of each row's copy that `length` plans to verify (`DraftLength.plan_expected`), each copied token
    counting with its row's rate of acceptance after a run as long as the one before it (`CopyRecord`; the copy
    followed `matched[b]` agreeing tokens), known before anything is verified. Those rates are the row's record of
    acceptance already, so they are not calibrated again as a draft's confidence is. `rows`: those still decoding."""
    available = torch.tensor([len(row) for row in copied], device="cpu")  # (batch,)

    def expected() -> Float[Tensor, "batch options"]:  # E(0..longest copy), where the rule weighs it
        chances = record.chances(max(map(len, copied), default=0), matched)  # (batch, longest copy)
        return expected_tokens(chances.to(length.hits.device).cumprod(1))

    keep = length.plan_expected(expected, available, rows).tolist()
    return [row[:n] for row, n in zip(copied, keep, strict=True)]


def copy_choice(name: str, length: DraftLength, steps: list[Step]) -> Choice:
    """What the rule chose over the run (`Stats.choices`), with its break-even: verifying a copy's first token pays
    only while its chance of acceptance exceeds r (t(2) - t(1)), r the row's rate so far (`DraftLength.plan`)."""
    added = length.costs.t(2) - length.costs.t(1)
    pays = (
        f"no prefix of the copy was expected to pay for its tokens in the forward (one more verified token costs "
        f"{added:.2f} of a 1-token forward, weighed at the row's tokens per unit of cost so far)"
    )
    fix = f"{name}(num_draft_tokens=k) verifies up to k copied tokens every step"
    return drafting_choice(name, length, steps, guesses="copied tokens", pays=pays, fix=fix)
