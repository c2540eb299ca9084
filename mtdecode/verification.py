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

Every row of a batch runs the rule on its own candidates with its own random stream; a
candidate shorter than the others, or missing, is padded with -1, which proposes nothing.
"""

from dataclasses import dataclass

import torch
from einops import repeat

from mtdecode.plain import extend_with, prefill, sample_next
from mtdecode.sampling import RowRandom, Sampler, draw
from mtdecode.session import Session, Step, with_new_token
from mtdecode.tensor_types import Bool, Float, Int, Tensor

#: a padding entry in a candidate: proposes nothing (the candidate has ended)
NONE = -1


@dataclass(frozen=True)
class Verdict:
    """The outcome of verifying candidates, per row.

    - `candidate`: a candidate whose first `accepted` tokens were accepted (-1 if none was tried).
    - `accepted`: how many candidate tokens were accepted.
    - `tokens`: the tokens to commit, `(batch, length + 1)`: the accepted ones, then one token
      drawn from p at column `accepted` (columns after it unused).
    """

    candidate: Int[Tensor, " batch"]
    accepted: Int[Tensor, " batch"]
    tokens: Int[Tensor, "batch width"]


def verify_candidates(
    first: Float[Tensor, "batch vocab"],
    after: Float[Tensor, "batch candidate length vocab"],
    candidates: Int[Tensor, "batch candidate length"],
    random: RowRandom,
    rows: Bool[Tensor, " batch"] | None = None,
) -> Verdict:
    """Accept, in every row, the longest candidate prefix the multi-candidate rule allows, plus one token from p.

    **Arguments:**

    - `first`: p for the next token (after the newest committed token x0), per row.
    - `after`: `after[b, c, k]` is p after x0 and candidate c's tokens 0..k in row b.
    - `candidates`: the guessed tokens, one row per candidate, -1 where a candidate has ended
      or does not exist (no candidates at all: plain decoding).
    - `random`: the rows' random streams.
    - `rows`: the rows that draw (default: all); the others' verdicts are to be ignored.

    **Returns:**

    A `Verdict`; at temperature 0 its tokens are exactly what greedy decoding would emit.
    """
    batch, count, length = candidates.shape
    length = length if count else 0  # no candidates: plain decoding
    device = first.device
    rows = torch.ones(batch, dtype=torch.bool, device=device) if rows is None else rows
    alive = torch.ones(batch, count, dtype=torch.bool, device=device)  # candidates matching so far
    stopped = ~rows  # rows whose position-k proposals were all rejected (or that do not take part)
    accepted = torch.zeros(batch, dtype=torch.long, device=device)
    best = torch.full((batch,), -1, dtype=torch.long, device=device)
    p = first.double().clone()
    taken = torch.zeros(batch, length, dtype=torch.long, device=device)
    for k in range(length):
        proposals = torch.where(alive & ~stopped[:, None], candidates[:, :, k], NONE)  # (batch, candidate)
        best = torch.where(stopped, best, _first_true(alive))
        x, p = try_proposals(p, proposals, random)  # step 1
        stopped = stopped | (x < 0)  # step 3, once every proposal was rejected
        taken[:, k] = torch.where(stopped, 0, x)
        accepted = accepted + (~stopped).long()
        alive = alive & (candidates[:, :, k] == x[:, None])  # step 2
        p = torch.where(stopped[:, None], p, p_after(after, alive, k))
    best = torch.where(stopped, best, _first_true(alive))
    new_token = draw(p, random, rows)  # step 3's residual, or step 4's bonus token
    tokens, _ = with_new_token(taken, accepted, new_token)
    return Verdict(best, accepted, tokens)


def verify_logits(
    sampler: Sampler,
    first: Float[Tensor, "batch vocab"],
    after: Float[Tensor, "batch candidate length vocab"],
    candidates: Int[Tensor, "batch candidate length"],
    random: RowRandom,
    rows: Bool[Tensor, " batch"] | None = None,
) -> Verdict:
    """`verify_candidates` on the target's logits: at temperature 0 by `verify_greedy`, which gives the same
    verdict from the argmax tokens alone; otherwise on `sampler.probs` of the logits."""
    if sampler.greedy:
        return verify_greedy(first.argmax(-1), after.argmax(-1), candidates, random, rows)
    return verify_candidates(sampler.probs(first), sampler.probs(after), candidates, random, rows)


def verify_nothing(
    sampler: Sampler, first: Float[Tensor, "batch vocab"], random: RowRandom, rows: Bool[Tensor, " batch"] | None = None
) -> Verdict:
    """`verify_logits` with no candidate: p's own token after x0 (its argmax when greedy), drawn as a step with
    candidates draws it, so that a strategy's steps without any use the random streams alike."""
    none = torch.empty(first.shape[0], 0, 0, dtype=torch.long, device=first.device)  # (batch, candidate, length)
    return verify_logits(sampler, first, first.new_empty(*none.shape, first.shape[-1]), none, random, rows)


def verify_fed(
    sampler: Sampler,
    logits: Float[Tensor, "batch fed vocab"],
    after_at: Int[Tensor, "batch candidate length"],
    candidates: Int[Tensor, "batch candidate length"],
    random: RowRandom,
    rows: Bool[Tensor, " batch"] | None = None,
) -> Verdict:
    """`verify_logits` for candidates fed in one forward as a tree, x0 first: p after candidate c's token k is the
    forward's distribution at fed position `after_at[b, c, k]` (any position where the candidate has ended). At
    temperature 0 the target's token is read once per fed position and then gathered, instead of gathering a copy of
    the vocabulary's logits for every candidate's every token (paths share their nodes); the verdict is the same."""
    index = torch.arange(logits.shape[0], device=logits.device)[:, None, None]  # (batch, 1, 1)
    if sampler.greedy:
        target = logits.argmax(-1)  # (batch, fed): the target's token after each fed token
        return verify_greedy(target[:, 0], target[index, after_at], candidates, random, rows)
    return verify_logits(sampler, logits[:, 0], logits[index, after_at], candidates, random, rows)


def verify_greedy(
    first: Int[Tensor, " batch"],
    after: Int[Tensor, "batch candidate length"],
    candidates: Int[Tensor, "batch candidate length"],
    random: RowRandom,
    rows: Bool[Tensor, " batch"] | None = None,
) -> Verdict:
    """`verify_candidates` when p is one-hot (temperature 0), given the target's tokens instead of p: `first` is
    its token after x0, `after[b, c, k]` its token after candidate c's tokens 0..k. A proposal is accepted exactly
    when it is the target's token (p(x) is 1 or 0), so no number is needed; the final token's number, which the
    general rule draws, is skipped: both rules leave the random streams alike."""
    batch, count, length = candidates.shape
    device = first.device
    rows = torch.ones(batch, dtype=torch.bool, device=device) if rows is None else rows
    if count == 0:  # no candidate (a plain step): the target's token, and the final draw's number skipped
        random.skip(rows.long())
        none = torch.full((batch,), NONE, dtype=torch.long, device=device)
        return Verdict(none, torch.zeros_like(none), first[:, None].clone())
    if count == 1:  # one chain of guesses (speculative, prompt lookup): the same verdict in a few tensor operations
        return _verify_greedy_chain(first, after[:, 0], candidates[:, 0], random, rows)
    alive = torch.ones(batch, count, dtype=torch.bool, device=device)
    stopped = ~rows
    accepted = torch.zeros(batch, dtype=torch.long, device=device)
    best = torch.full((batch,), -1, dtype=torch.long, device=device)
    target = first.clone()  # the token greedy decoding emits next, per row
    taken = torch.zeros(batch, length, dtype=torch.long, device=device)
    for k in range(length):
        proposals = torch.where(alive & ~stopped[:, None], candidates[:, :, k], NONE)
        best = torch.where(stopped, best, _first_true(alive))
        stopped = stopped | ~(proposals == target[:, None]).any(1)  # step 3: no proposal is the target's token
        taken[:, k] = torch.where(stopped, 0, target)
        accepted = accepted + (~stopped).long()
        alive = alive & (candidates[:, :, k] == target[:, None])  # step 2
        leader = _first_true(alive).clamp(min=0)  # as `p_after`: the first candidate still alive
        target = torch.where(stopped, target, after[torch.arange(batch, device=device), leader, k])
    best = torch.where(stopped, best, _first_true(alive))
    random.skip(rows.long())  # the general rule's final draw uses one number per drawing row
    tokens, _ = with_new_token(taken, accepted, target)
    return Verdict(best, accepted, tokens)


def _verify_greedy_chain(
    first: Int[Tensor, " batch"],
    after: Int[Tensor, "batch length"],
    guesses: Int[Tensor, "batch length"],
    random: RowRandom,
    rows: Bool[Tensor, " batch"],
) -> Verdict:
    """`verify_greedy` with a single candidate per row: the guesses are accepted up to the first one that is not the
    target's token, and the target's token after them is the new one (no loop over positions)."""
    targets = torch.cat([first[:, None], after], dim=1)  # (batch, length + 1): the target's token at x0, after each
    matched = (guesses == targets[:, :-1]).long().cumprod(1)  # 1 while every guess so far was the target's token
    accepted = torch.where(rows, matched.sum(1), 0)
    random.skip(rows.long())  # the general rule's final draw, as in `verify_greedy`
    taken = torch.where(torch.arange(guesses.shape[1], device=guesses.device) < accepted[:, None], guesses, 0)
    tokens, _ = with_new_token(taken, accepted, targets.gather(1, accepted[:, None])[:, 0])
    best = torch.where(rows, 0, NONE)
    return Verdict(best, accepted, tokens)


def try_proposals(
    p: Float[Tensor, "batch vocab"], proposals: Int[Tensor, "batch candidate"], random: RowRandom
) -> tuple[Int[Tensor, " batch"], Float[Tensor, "batch vocab"]]:
    """Step 1 at one position, in every row: try each distinct proposal x in turn, accepting it with
    probability p(x) and otherwise removing it from p. Returns the accepted token per row (-1 if none)
    and what is left of p. A row draws a number only for a proposal whose outcome is not certain."""
    batch, count = proposals.shape
    chosen = torch.full((batch,), NONE, dtype=torch.long, device=p.device)
    for c in range(count):
        x = proposals[:, c]
        repeat = (proposals[:, :c] == x[:, None]).any(1)  # distinct tokens only, in first-come order
        trying = (x >= 0) & ~repeat & (chosen < 0)
        p_x = p.gather(1, x.clamp(min=0)[:, None])[:, 0]
        without_x = p.scatter(1, x.clamp(min=0)[:, None], 0.0)
        rest = without_x.sum(-1)
        certain_no = p_x <= 0  # rejected for sure; p stays as it is
        certain_yes = rest <= 0  # x holds all the mass: a rejection has probability 0
        uncertain = trying & ~certain_no & ~certain_yes
        u = random.uniform(uncertain.long())[:, 0].to(p.device)
        accept = trying & ~certain_no & (certain_yes | (u < p_x))
        reject = trying & ~certain_no & ~accept
        chosen = torch.where(accept, x, chosen)
        residual = without_x / rest.clamp(min=torch.finfo(p.dtype).tiny)[:, None]  # norm(max(0, p - 1[x]))
        p = torch.where(reject[:, None], residual, p)
    return chosen, p


def p_after(
    after: Float[Tensor, "batch candidate length vocab"], alive: Bool[Tensor, "batch candidate"], k: int
) -> Float[Tensor, "batch vocab"]:
    """Step 2's new p: the target's distribution after the accepted prefix, read from a candidate that
    proposed it (the first one still alive)."""
    leader = _first_true(alive).clamp(min=0)
    return after[torch.arange(after.shape[0], device=after.device), leader, k].double()


def _first_true(flags: Bool[Tensor, "batch candidate"]) -> Int[Tensor, " batch"]:
    """Index of the first True per row, -1 if none."""
    if flags.shape[1] == 0:
        return torch.full((flags.shape[0],), -1, dtype=torch.long, device=flags.device)
    first = flags.long().argmax(1)
    return torch.where(flags.any(1), first, -1)


def verify_chain(
    s: Session, guesses: Int[Tensor, "batch guesses"]
) -> tuple[list[Step], Float[Tensor, "batch rows vocab"], Int[Tensor, " batch"]]:
    """Verify each row's guessed continuation in one target forward and commit the result.

    Feeds every row's unread committed tokens and its guesses left to right (-1 pads a row
    with fewer guesses), applies `verify_candidates` with the guesses as the only candidate,
    rolls the cache back to the accepted tokens and commits them with the target's own token.
    Where no row has a guess, the step is a plain one (`mtdecode.plain`), without the rule's bookkeeping.

    **Returns:**

    The committed steps, the target's logits at x0 and at each guess (`guesses + 1` rows),
    for strategies that make their next guesses from them, and each row's accepted count.
    """
    k = guesses.shape[1]
    if k == 0:  # no row verifies a guess: a plain step at greedy cost, p's own draw as the rule's with no candidate
        none = torch.zeros(s.batch, dtype=torch.long, device=s.device)
        logits = prefill(s)  # (batch, vocab), after every row's unread tokens
        steps = s.commit(sample_next(s, logits)[:, None], 1, drafted=none, accepted=none)
        return steps, logits[:, None], none
    logits = extend_with(s, guesses)  # (batch, k + 1, vocab)
    verdict = verify_logits(s.sampler, logits[:, 0], logits[:, None, 1:], guesses[:, None, :], s.random, s.active)
    s.target.cache.crop(s.lengths + verdict.accepted)  # the committed tokens + the accepted guesses
    drafted = (guesses >= 0).sum(1)
    steps = s.commit(verdict.tokens, verdict.accepted + 1, drafted=drafted, accepted=verdict.accepted)
    return steps, logits, verdict.accepted


def padded(rows: list[list[int]], device: torch.device, fill: int = NONE) -> Int[Tensor, "batch guesses"]:
    """Rows of guesses of different lengths as one tensor, padded with `fill` (by default -1, no guess)."""
    width = max(map(len, rows), default=0)
    return torch.tensor([row + [fill] * (width - len(row)) for row in rows], dtype=torch.long, device=device).reshape(
        len(rows), width
    )


def root_to_leaf(
    parent: Int[Tensor, "batch node"], depth: Int[Tensor, "batch node"], valid: Bool[Tensor, "batch node"]
) -> Int[Tensor, "batch leaves longest"]:
    """Every root-to-leaf path of each row's tree of `valid` nodes (`parent[b, j]`: node j's parent, -1 under the
    root; `depth`: 1 under the root; parents come first), as node indices from the root down, -1 past a path's end
    and for a row with fewer leaves: the candidates a tree offers the multi-candidate rule."""
    batch, n = parent.shape
    device = parent.device
    rows = torch.arange(batch, device=device)[:, None]
    longest = int(depth.max())
    child = (parent[:, :, None] == torch.arange(n, device=device)) & valid[:, :, None]  # (batch, child, node)
    leaf = valid & ~child.any(1)  # (batch, n): no valid child
    paths = torch.full((batch, n, longest + 1), -1, dtype=torch.long, device=device)  # a spare last column
    node = repeat(torch.arange(n, device=device), "n -> batch n", batch=batch)
    level = depth.clone()
    for _ in range(longest):  # walk every node up to the root, writing it at its depth
        live = node >= 0
        paths.scatter_(2, torch.where(live, level - 1, longest)[:, :, None], node[:, :, None])
        node = torch.where(live, parent.gather(1, node.clamp(min=0)), -1)
        level = level - 1
    paths = paths[:, :, :longest]
    rank = torch.where(leaf, 0, torch.where(valid, 1, 2))  # leaves first, then the valid nodes as fillers
    order = rank.argsort(dim=1, stable=True)[:, : int(leaf.sum(1).max())]
    return torch.where(valid.gather(1, order)[:, :, None], paths[rows, order], -1)  # (batch, leaves, longest)


def kept_parents(parent: Int[Tensor, "batch node"], chosen: Int[Tensor, "batch n"]) -> Int[Tensor, "batch n"]:
    """The tree of the `chosen` nodes (parents first) alone: each one's parent as an index among the chosen, -1 under
    the root (`parent`: every node's parent among all of them)."""
    kept = repeat(torch.arange(chosen.shape[1], device=chosen.device), "n -> batch n", batch=chosen.shape[0])
    slot = torch.full_like(parent, -1).scatter_(1, chosen, kept)  # each node's place among the chosen, or -1
    above = parent.gather(1, chosen)
    return torch.where(above >= 0, slot.gather(1, above.clamp(min=0)), -1)


def best_nodes(worth: Float[Tensor, "batch node"], n: int) -> tuple[Int[Tensor, "batch n"], Int[Tensor, "batch n"]]:
    """Each row's `n` worthiest nodes of a tree (a child never worth more than its parent), parents first, and each
    one's rank (ties to the earlier node, so no child comes in without its parent; a row's best k < n are those of
    rank below k)."""
    return worth.argsort(dim=1, descending=True, stable=True)[:, :n].sort(dim=1)
