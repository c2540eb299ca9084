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

How many of the copied tokens to verify: `num_draft_tokens=k` copies up to k, else the policy decides
(`mtdecode.policy`; by default as many as are expected to pay for their place in the forward, from how often
this row's copied tokens were accepted so far, at most `max_draft_tokens`). The policy never looks at p, so the
output stays exact.
"""

from collections.abc import Iterator
from dataclasses import dataclass

from mtdecode.copying import lookup_rows
from mtdecode.policy import Adaptive, Fixed, fixed_or
from mtdecode.session import Session, Step
from mtdecode.strategy import check_counts
from mtdecode.verification import padded, verify_chain


@dataclass(frozen=True)
class PromptLookup:
    """Draft by copying what followed the last n-gram's previous occurrence; verify in one forward.

    **Arguments:**

    - `ngram`: the longest n-gram to match (at least 1); shorter ones are tried if it has no match.
    - `num_draft_tokens`: copy up to this many tokens per step (at least 1); None (the default): as many as
      `policy` decides, at most `max_draft_tokens`.
    - `max_draft_tokens`: the most copied tokens a step verifies when `policy` decides.
    - `policy`: how many copied tokens to verify (`mtdecode.policy`); `Adaptive()` by default.
    """

    ngram: int = 3
    num_draft_tokens: int | None = None
    max_draft_tokens: int = 10
    policy: Adaptive | Fixed = Adaptive()

    def __post_init__(self) -> None:
        check_counts(self, ("ngram", "num_draft_tokens", "max_draft_tokens"), optional=["num_draft_tokens"])

    def decode(self, s: Session) -> Iterator[list[Step]]:
        plan = fixed_or(self.num_draft_tokens, self.policy).copies(s, most=self.max_draft_tokens)
        while not s.done:
            k = s.budget(plan.most).tolist()  # the step adds one token of its own
            copied, matched = lookup_rows(s.tokens, self.ngram, k)  # step 1
            copied = plan.verify(copied, matched, s.active)  # those worth verifying
            steps, _, accepted = verify_chain(s, padded(copied, s.device))  # step 2
            plan.record(copied, matched, accepted)
            yield steps
