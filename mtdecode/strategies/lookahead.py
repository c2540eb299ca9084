"""Lookahead decoding (Fu, Bailis, Stoica, Zhang, ICML 2024): Jacobi iteration feeds an n-gram pool,
and n-grams from the pool are verified, both in the same forward pass.

The target guesses its own future; no draft model. Three parameters (the paper's names):
W, the window's width; N, the n-gram size; G, how many candidates are verified per step.

- The **lookahead branch** is a window of N-1 rows by W columns: the last N-1 Jacobi
  iterates. Column j read top to bottom, then the model's prediction under its last cell,
  is an n-gram: W new n-grams per step (Section 3.1, Figure 2).
- The **pool** keeps those n-grams keyed by their first token, at most G per key, the least
  recently used dropped (Section 3.2). It can also be seeded with the prompt's n-grams.
- The **verification branch** is up to G pool n-grams whose first token is x0, the newest
  committed token; they are verified by `mtdecode.verification` (Section 3.3; exact greedy
  at temperature 0, exactly p when sampling).
- Both branches go through ONE forward pass, with the mask and positions of
  `mtdecode.masks.LookaheadLayout`. Afterwards only the accepted candidate tokens' cache
  entries survive (`KVCache.keep`).

Warm-up (as the paper's code does it): the window starts as one row of W + N - 3 tokens drawn
from the prompt and grows a row per step, each row dropping one column, until it has N-1
rows of W columns; the pool fills from then on. Per step, with x0 the newest committed token:

1. candidates: up to G pool n-grams keyed by x0;
2. one forward over `[unread tokens .. x0] [window] [candidates]` (`lookahead_step`);
3. verify the candidates and keep the accepted tokens' cache entries (`verify_and_keep`);
4. the predictions under the window's last row are the new row; a full window gives W n-grams;
5. slide the window.

With W=1 and N=2 the window is x0 alone: a step where no row verifies a candidate is then a plain step
(`plain_step`), without the layout's mask and the cache's `keep`.

In a batch every row has its own window and pool; the rows step together, so their windows
have the same shape, and a row with fewer candidates than another is padded with -1.

`Lookahead(W, N, G)` runs the paper's fixed setting. A value left as None is chosen by the policy
(`mtdecode.policy.Adaptive.lookahead`) for the model's measured forward costs: the paper's A100
defaults (W=7, N=5, G=7, 56 tokens per forward) are slower than greedy on a small CPU. Where G is
chosen it is the most candidates a step verifies, and each step verifies only those expected to pay
for their tokens in the forward. When all three are left as None and no setting is predicted to
beat greedy, `Lookahead()` decodes greedily, and `result.stats.choices` says why (`generate` warns
once with `mtdecode.GreedyFallbackWarning`). The policy reads only earlier steps, never this step's
p, so the output stays exact.
"""

from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import no_type_check

import torch
from einops import rearrange, repeat

from mtdecode.copying import prompt_tokens
from mtdecode.masks import LookaheadLayout
from mtdecode.model import left_pad
from mtdecode.plain import decode_plainly, prefill
from mtdecode.policy import Adaptive
from mtdecode.session import Session, Step
from mtdecode.tensor_types import Float, Int, Tensor
from mtdecode.verification import NONE, Verdict, verify_logits


@dataclass(frozen=True)
class Lookahead:
    """Lookahead decoding with a W-wide, (N-1)-deep Jacobi window and up to G verified n-grams.

    **Arguments:**

    - `window`: W, the window's width (at least 1); None: chosen by `policy`.
    - `ngram`: N, the n-gram size (at least 2); None: chosen by `policy`.
    - `guesses`: G, candidates verified per step and n-grams kept per key (at least 0); None: chosen by `policy`,
      and then each step verifies only the candidates that pay, up to G.
    - `prompt_pool`: also put the prompt's n-grams in the pool (the default: with the candidates that do not
      pay left unverified, the fastest setting measured; `docs/strategies/lookahead.md`).
    - `policy`: what chooses the values left as None, and the candidates each step verifies where G is
      (`mtdecode.policy.Adaptive`; its `costs`, where given, price the candidates).
    """

    window: int | None = None
    ngram: int | None = None
    guesses: int | None = None
    prompt_pool: bool = True
    policy: Adaptive = Adaptive()

    def __post_init__(self) -> None:
        for name, least in (("window", 1), ("ngram", 2), ("guesses", 0)):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
                raise ValueError(f"{name} must be None (tuned) or an integer >= {least}, got {value!r}")

    def decode(self, s: Session) -> Iterator[list[Step]]:
        plan = self.policy.lookahead(s, self.window, self.ngram, self.guesses, prompt_pool=self.prompt_pool)
        if plan.greedy:  # no setting is predicted to beat greedy on this host: `result.stats.choices` says why
            yield from decode_plainly(s)
            return
        w, n, g = plan.settings
        pools = [NgramPool(per_key=g) for _ in range(s.batch)]  # one pool per row
        if self.prompt_pool:
            for pool, tokens in zip(pools, s.tokens, strict=True):
                pool.add_all(tokens, n)
        window = Window([prompt_tokens(s, w + n - 3)], depth=n - 1)  # warm-up start: one row, plus x0
        while not s.done:
            grid = window.grid(x0=s.last_tokens)  # (batch, rows, columns)
            lengths = (s.remaining - 1).clamp(min=0, max=n - 1).tolist()
            found = [pool.candidates(x0, m) for pool, x0, m in zip(pools, s.last_tokens.tolist(), lengths, strict=True)]
            found = plan.verify(found, s.active)  # those worth verifying
            candidates = pad_candidates(found, s.device)  # step 1
            if candidates.shape[1] == 0 and window.columns == 1 and len(window.rows) == 1:
                steps, new_row, verdict = plain_step(s, candidates)  # nothing to verify, a window of x0 alone
            else:
                steps, new_row, verdict = lookahead_step(s, window, candidates)  # steps 2-3
            plan.record(found, verdict.candidate, verdict.accepted)
            yield steps
            if window.full:
                for pool, columns, predictions in zip(pools, grid.tolist(), new_row.tolist(), strict=True):
                    pool.add_columns(columns, predictions)  # step 4
            window.slide(new_row)  # step 5


@no_type_check  # plain ints and lists, one pool per row, called per row per step (see `mtdecode.tensor_types`)
class NgramPool:
    """n-grams keyed by their first token; at most `per_key` continuations per key, least recently used dropped."""

    def __init__(self, per_key: int) -> None:
        self.per_key = per_key
        self.table: dict[int, OrderedDict[tuple[int, ...], None]] = {}

    def add(self, ngram: Sequence[int]) -> None:
        """Put `ngram` under its first token; an n-gram already there becomes the most recent."""
        if self.per_key == 0:
            return
        continuations = self.table.setdefault(ngram[0], OrderedDict())
        rest = tuple(ngram[1:])
        continuations[rest] = None
        continuations.move_to_end(rest)
        if len(continuations) > self.per_key:
            continuations.popitem(last=False)

    def add_all(self, tokens: Sequence[int], n: int) -> None:
        """Every n-gram of `tokens`, in order."""
        for start in range(len(tokens) - n + 1):
            self.add(tokens[start : start + n])

    def add_columns(self, grid: list[list[int]], new_row: list[int]) -> None:
        """Section 3.2: column j of a full window, then the prediction under it, is an n-gram."""
        for j, prediction in enumerate(new_row):
            self.add([row[j] for row in grid] + [prediction])

    def candidates(self, key: int, length: int) -> list[list[int]]:
        """The continuations of `key` cut to `length` tokens, most recent first, without repeats."""
        if length < 1:
            return []
        cut = (rest[:length] for rest in reversed(self.table.get(key, ())))
        return [list(rest) for rest in dict.fromkeys(cut)]


def pad_candidates(found: list[list[list[int]]], device: torch.device) -> Int[Tensor, "batch candidate length"]:
    """Every row's candidates as one tensor, padded with -1 (no candidate, or a shorter one)."""
    count = max(map(len, found), default=0)
    length = max((len(c) for row in found for c in row), default=0)
    padded = torch.full((len(found), count, length), NONE, dtype=torch.long, device="cpu")
    for b, row in enumerate(found):
        for c, candidate in enumerate(row):
            padded[b, c, : len(candidate)] = torch.tensor(candidate, dtype=torch.long, device="cpu")
    return padded.to(device)


class Window:
    """The lookahead branch of every row: rows of Jacobi guesses; cell (0, 0) is always x0, the newest committed token.

    Row 0 is stored without x0 (`columns - 1` tokens); rows 1.. have `columns` tokens; each is a
    `(batch, tokens)` tensor. Warm-up (as the paper's code does it) starts from one row of
    W + N - 3 tokens: each step adds a row and drops a column, so after N - 2 steps the window
    has N - 1 rows of W columns.
    """

    def __init__(self, rows: list[Int[Tensor, "batch tokens"]], depth: int) -> None:
        self.rows = rows
        self.depth = depth  # N - 1, the number of rows once warmed up

    @property
    def columns(self) -> int:
        return self.rows[0].shape[1] + 1

    @property
    def full(self) -> bool:
        return len(self.rows) == self.depth

    def grid(self, x0: Int[Tensor, " batch"]) -> Int[Tensor, "batch rows columns"]:
        """The rows with x0 put in front of row 0."""
        return torch.stack([torch.cat([x0[:, None], self.rows[0]], dim=1), *self.rows[1:]], dim=1)

    def slide(self, new_row: Int[Tensor, "batch columns"]) -> None:
        """Move the window one Jacobi iteration on, after the step committed a token.

        While warming up, every row (and the new one) drops its first column, the position
        just committed, and the new row is added below. Once full, every row moves up a level:
        row 1 becomes row 0 (its first cell is now the committed token), the new row comes last.
        """
        if not self.full:
            self.rows = [row[:, 1:] for row in self.rows] + [new_row[:, 1:]]
        else:
            levels = [*self.rows[1:], new_row]
            self.rows = [levels[0][:, 1:], *levels[1:]]


def lookahead_step(
    s: Session, window: Window, candidates: Int[Tensor, "batch candidate length"]
) -> tuple[list[Step], Int[Tensor, "batch columns"], Verdict]:
    """One forward over the unread tokens, the window and the candidates; verify; keep the accepted entries.

    **Returns:**

    The committed steps, the new window row (the target's prediction under each cell of the
    window's last row), and the verdict (which candidate, how many of its tokens).
    """
    context, pad = left_pad(s.unread(s.target), s.device)  # (batch, u): [.., x0], shorter rows padded on the left
    count, length = candidates.shape[1:] if candidates.shape[2] else (0, 0)
    layout = LookaheadLayout(context.shape[1], len(window.rows), window.columns, count, length)
    laid_out = rearrange(candidates[:, :count].clamp(min=0), "batch candidate length -> batch (candidate length)")
    ids = torch.cat([context, *window.rows, laid_out], dim=1)  # the input order of `LookaheadLayout`
    last_row = layout.row(layout.rows - 1)  # starts with x0 when the window is one row deep (N = 2)
    after_x0 = [] if layout.rows == 1 else [layout.cell(0, 0)]  # the output layer reads x0 once
    candidate_rows = [layout.candidate(c, k) for c in range(count) for k in range(length)]
    wanted = torch.tensor([*after_x0, *last_row, *candidate_rows], device=s.device)
    logits = s.target.forward(
        ids, layout.positions(device=s.device), layout.mask(device=s.device), pad=pad, logits_to_keep=wanted
    )  # (batch, [1] + columns + candidates * length, vocab)
    first = len(after_x0)
    new_row = logits[:, first : first + layout.columns].argmax(dim=-1)
    candidate_logits = logits[:, first + layout.columns :]
    steps, verdict = verify_and_keep(s, layout, candidates[:, :count], logits[:, 0], candidate_logits)
    return steps, new_row, verdict


def plain_step(s: Session, candidates: Int[Tensor, "batch 0 0"]) -> tuple[list[Step], Int[Tensor, "batch 1"], Verdict]:
    """`lookahead_step` where no row verifies a candidate (`candidates` is empty) and the window is x0 alone (W = 1,
    N = 2): its input is then the unread tokens, so the step is a plain one, taken at greedy's cost
    (`mtdecode.plain.prefill`), without the layout's mask and the cache's `keep`. The same verdict (a step with no
    candidate: p's token, the random streams alike) and the same new window row (the target's argmax after x0)."""
    logits = prefill(s)  # (batch, vocab), after every row's unread tokens
    after = logits.new_empty(*candidates.shape, logits.shape[-1])  # (batch, 0, 0, vocab): no candidate to score
    verdict = verify_logits(s.sampler, logits, after, candidates, s.random, s.active)
    steps = s.commit(verdict.tokens, verdict.accepted + 1, drafted=0, accepted=verdict.accepted)
    return steps, logits.argmax(dim=-1)[:, None], verdict


def verify_and_keep(
    s: Session,
    layout: LookaheadLayout,
    candidates: Int[Tensor, "batch candidate length"],
    x0_logits: Float[Tensor, "batch vocab"],
    candidate_logits: Float[Tensor, "batch rows vocab"],
) -> tuple[list[Step], Verdict]:
    """Section 3.3: verify the candidates, keep the cache entries of the context and the accepted tokens."""
    batch = x0_logits.shape[0]
    after = rearrange(candidate_logits, "batch (candidate length) vocab -> batch candidate length vocab",
                      candidate=layout.candidates, length=layout.length)  # fmt: skip
    verdict = verify_logits(s.sampler, x0_logits, after, candidates, s.random, s.active)
    # the context's entries, then the winning candidate's accepted tokens; the window and the other candidates go
    k = torch.arange(layout.length, device=s.device)
    chosen = layout.candidate_start + verdict.candidate.clamp(min=0)[:, None] * layout.length + k  # (batch, length)
    accepted = torch.where(k < verdict.accepted[:, None], chosen, -1)
    context = repeat(torch.arange(layout.context, device=s.device), "context -> batch context", batch=batch)
    s.target.cache.keep(torch.cat([context, accepted], dim=1))
    drafted = (candidates[:, 0] >= 0).sum(1) if layout.candidates else 0
    return s.commit(verdict.tokens, verdict.accepted + 1, drafted=drafted, accepted=verdict.accepted), verdict
