"""Verifying guessed n-grams that come without a draft distribution (one-hot drafts).

Jacobi, prompt-lookup and lookahead decoding guess tokens without a draft model: a guess
is a token, not a distribution. Speculative sampling's rule (Leviathan et al. 2023,
Algorithm 1) with a one-hot draft q = 1[x] reads: accept x with probability
min(1, p(x) / 1) = p(x); on rejection draw from norm(max(0, p - 1[x])), which is p with x
removed and renormalised. Lookahead decoding (Fu et al. 2024, Section 3.3, Algorithm 4
of the appendix) applies it to several candidates in turn, at each position:

1. for each distinct token x proposed by a surviving candidate, in order:
   accept x with probability p(x); on rejection set p(x) = 0 and renormalise;
2. if some x was accepted, keep only the candidates that propose it and move to the next
   position, where p is the target's distribution after that prefix;
3. if every proposal was rejected, draw the new token from what is left of p and stop;
4. if a candidate was accepted to its end, draw a bonus token from p after it.

Each position emits x with probability p(x) whatever the candidates were, as long as they
were chosen before this step's random draws, so the output is distributed exactly as
token-by-token sampling from p. At temperature 0 p is one-hot and the rule is greedy
verification: accept the longest candidate prefix that matches the target's argmax, plus
the target's next token (also after a full match).
"""

from dataclasses import dataclass

import torch

from mtdecode.sampling import draw
from mtdecode.session import Session, Step
from mtdecode.tensor_types import Float, Int, Tensor


@dataclass(frozen=True)
class Verdict:
    """The outcome of verifying candidates.

    - `candidate`: index of a candidate whose first `accepted` tokens were accepted (-1 if none was tried).
    - `accepted`: how many candidate tokens were accepted.
    - `tokens`: the tokens to commit: the accepted ones and one token drawn from p.
    """

    candidate: int
    accepted: int
    tokens: list[int]


def verify_candidates(
    first: Float[Tensor, " vocab"],
    after: Float[Tensor, "candidate length vocab"],
    candidates: Int[Tensor, "candidate length"],
    generator: torch.Generator,
) -> Verdict:
    """Accept the longest candidate prefix the multi-candidate rule allows, plus one token from p.

    **Arguments:**

    - `first`: p for the next token (after the newest committed token x0).
    - `after`: `after[c, k]` is p after x0 and candidate c's tokens 0..k.
    - `candidates`: the guessed tokens, one row per candidate (no rows: plain decoding).
    - `generator`: the random generator of the `generate` call.

    **Returns:**

    A `Verdict`; at temperature 0 its tokens are exactly what greedy decoding would emit.
    """
    guesses = candidates.tolist()
    alive = list(range(len(guesses)))  # candidates whose tokens so far were all accepted
    accepted: list[int] = []
    p = first
    for k in range(candidates.shape[1]):
        x, p = try_proposals(p, [guesses[c][k] for c in alive], generator)  # step 1
        if x is None:  # step 3
            return Verdict(alive[0] if alive else -1, k, accepted + [int(draw(p, generator))])
        accepted.append(x)
        alive = [c for c in alive if guesses[c][k] == x]  # step 2
        p = after[alive[0], k]
    best = alive[0] if alive else -1
    return Verdict(best, len(accepted), accepted + [int(draw(p, generator))])  # step 4: the bonus token


def try_proposals(
    p: Float[Tensor, " vocab"], proposals: list[int], generator: torch.Generator
) -> tuple[int | None, Float[Tensor, " vocab"]]:
    """Step 1 at one position: try each distinct proposal x in turn, accepting it with probability p(x)
    and otherwise removing it from p. Returns the accepted token (or None) and what is left of p."""
    for x in dict.fromkeys(proposals):  # distinct, first-come order
        p_x = float(p[x])
        if p_x <= 0.0:
            continue  # rejected for sure; p stays as it is
        rest = p.clone()
        rest[x] = 0.0
        if float(rest.sum()) <= 0.0:
            return x, p  # x holds all the mass: a rejection has probability 0
        if float(torch.rand((), generator=generator, dtype=torch.float64, device=p.device)) < p_x:
            return x, p
        p = rest / rest.sum()  # norm(max(0, p - 1[x]))
    return None, p


def verify_chain(s: Session, guesses: list[int]) -> tuple[Step, Float[Tensor, "rows vocab"]]:
    """Verify one guessed continuation in one target forward and commit the result.

    Feeds the unread committed tokens and `guesses` left to right, applies
    `verify_candidates` with the guesses as the only candidate, rolls the cache back to
    the accepted tokens and commits them with the target's own token.

    **Returns:**

    The committed `Step`, and the target's logits at x0 and at each guess
    (`len(guesses) + 1` rows), for strategies that make their next guesses from them.
    """
    logits = s.target.extend(s.unread(s.target) + guesses, logits_to_keep=len(guesses) + 1)  # (k + 1, vocab)
    p = s.sampler.probs(logits)
    candidates = torch.tensor(guesses, dtype=torch.long, device=logits.device).reshape(1, len(guesses))
    verdict = verify_candidates(p[0], p[None, 1:], candidates, s.generator)
    s.target.cache.crop(len(s.tokens) + verdict.accepted)  # committed tokens + the accepted guesses
    return s.commit(verdict.tokens, drafted=len(guesses), accepted=verdict.accepted), logits
