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
3. verify the candidates (`verify_logits`), keep the accepted tokens' cache entries (`keep_accepted`);
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

from collections.abc import Iterator
from dataclasses import dataclass

from mtdecode.copying import prompt_tokens
from mtdecode.plain import decode_plainly
from mtdecode.policy import Adaptive
from mtdecode.session import Session, Step
from mtdecode.strategies.lookahead.pool import NgramPool, pad_candidates
from mtdecode.strategies.lookahead.step import lookahead_step, plain_step
from mtdecode.strategies.lookahead.window import Window

__all__ = ["Lookahead", "NgramPool", "Window", "lookahead_step", "plain_step"]


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
                steps, new_row, verdict = plain_step(s)  # nothing to verify, a window of x0 alone
            else:
                steps, new_row, verdict = lookahead_step(s, window, candidates)  # steps 2-3
            plan.record(found, verdict.candidate, verdict.accepted)
            yield steps
            if window.full:
                for pool, columns, predictions in zip(pools, grid.tolist(), new_row.tolist(), strict=True):
                    pool.add_columns(columns, predictions)  # step 4
            window.slide(new_row)  # step 5
