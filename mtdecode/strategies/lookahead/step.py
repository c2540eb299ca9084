"""One lookahead step: the window and the candidates in one forward (Figure 2), then verification (Section 3.3)."""

import torch
from einops import rearrange, repeat

from mtdecode.masks import LookaheadLayout
from mtdecode.model import left_pad
from mtdecode.plain import prefill
from mtdecode.session import Session, Step
from mtdecode.strategies.lookahead.window import Window
from mtdecode.tensor_types import Int, Tensor
from mtdecode.verification import Verdict, verify_logits, verify_nothing


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
    scored = logits[:, first + layout.columns :]  # (batch, candidate * length, vocab)
    after = rearrange(scored, "batch (candidate length) vocab -> batch candidate length vocab",
                      candidate=count, length=length)  # fmt: skip
    verdict = verify_logits(s.sampler, logits[:, 0], after, candidates[:, :count], s.random, s.active)  # Section 3.3
    return keep_accepted(s, layout, candidates[:, :count], verdict), new_row, verdict


def plain_step(s: Session) -> tuple[list[Step], Int[Tensor, "batch 1"], Verdict]:
    """`lookahead_step` where no row verifies a candidate and the window is x0 alone (W = 1, N = 2): its input is
    then the unread tokens, so the step is a plain one, taken at greedy's cost (`mtdecode.plain.prefill`), without
    the layout's mask and the cache's `keep`. The same verdict (a step with no candidate: p's token, the random
    streams alike) and the same new window row (the target's argmax after x0)."""
    logits = prefill(s)  # (batch, vocab), after every row's unread tokens
    verdict = verify_nothing(s.sampler, logits, s.random, s.active)
    steps = s.commit(verdict.tokens, verdict.accepted + 1, drafted=0, accepted=verdict.accepted)
    return steps, logits.argmax(dim=-1)[:, None], verdict


def keep_accepted(
    s: Session, layout: LookaheadLayout, candidates: Int[Tensor, "batch candidate length"], verdict: Verdict
) -> list[Step]:
    """Keep the cache entries of the context and the accepted tokens; commit the verdict's tokens."""
    batch = candidates.shape[0]
    # the context's entries, then the winning candidate's accepted tokens; the window and the other candidates go
    k = torch.arange(layout.length, device=s.device)
    chosen = layout.candidate_start + verdict.candidate.clamp(min=0)[:, None] * layout.length + k  # (batch, length)
    accepted = torch.where(k < verdict.accepted[:, None], chosen, -1)
    context = repeat(torch.arange(layout.context, device=s.device), "context -> batch context", batch=batch)
    s.target.cache.keep(torch.cat([context, accepted], dim=1))
    drafted = (candidates[:, 0] >= 0).sum(1) if layout.candidates else 0
    return s.commit(verdict.tokens, verdict.accepted + 1, drafted=drafted, accepted=verdict.accepted)
