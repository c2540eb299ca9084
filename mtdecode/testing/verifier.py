"""A fast statistical check of a multi-candidate (one-hot draft) verifier, without a model.

The target is a made-up autoregressive source over a 6-token vocabulary: the distribution
after any prefix is a fixed random softmax (seeded by the prefix). Three candidates of two
tokens share a first token or not, and include likely and unlikely tokens, so every path
of the rule is taken: accept, reject and try the next candidate, keep only the candidates
that share the accepted token, draw from the residual, draw the bonus token.

Each trial calls the verifier once, then continues from the source up to 3 tokens; the
counts of the 216 three-token blocks are compared with the source's exact joint by
`chi_square_test` at the stated false-alarm rate. A verifier that preserves the target
distribution fails with probability `false_alarm`.
"""

import functools
from collections.abc import Callable

import torch

from mtdecode.sampling import RowRandom, draw
from mtdecode.tensor_types import Float, Tensor
from mtdecode.testing.stats import GoodnessOfFit, chi_square_test

VOCAB = 6
BLOCK = 3
CANDIDATES = ((2, 4), (2, 1), (5, 0))


@functools.cache
def source(prefix: tuple[int, ...]) -> Float[Tensor, " vocab"]:
    """p(next token | prefix) of the made-up source: a softmax of seeded Gaussian scores."""
    seed = hash(prefix) % (2**31)
    scores = 1.5 * torch.randn(VOCAB, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return torch.softmax(scores, dim=-1)


def exact_blocks() -> Float[Tensor, " cells"]:
    """P(x_1, x_2, x_3) under the source, block (a, b, c) at cell a V^2 + b V + c."""
    joint = torch.zeros(VOCAB**BLOCK, dtype=torch.float64)
    for cell in range(VOCAB**BLOCK):
        block = (cell // VOCAB**2, cell // VOCAB % VOCAB, cell % VOCAB)
        joint[cell] = source(())[block[0]] * source(block[:1])[block[1]] * source(block[:2])[block[2]]
    return joint


def check_one_hot_verifier(
    verify: Callable, *, samples: int = 20_000, false_alarm: float = 1e-3, seed: int = 0
) -> GoodnessOfFit:
    """Chi-square test of `verify` (same signature as `mtdecode.verification.verify_candidates`)
    against the source's exact distribution of the first 3 tokens.

    The trials are the rows of one batch, each with its own random stream (seeds seed, seed + 1, ...).
    """
    candidates = torch.tensor(CANDIDATES).expand(samples, -1, -1)  # (trials, candidate, length)
    first = source(()).expand(samples, -1)
    after = torch.stack([torch.stack([source(tuple(c[: k + 1])) for k in range(len(c))]) for c in CANDIDATES])
    random = RowRandom(range(seed, seed + samples))
    verdict = verify(first, after.expand(samples, -1, -1, -1), candidates, random)
    blocks = [row[: n + 1] for row, n in zip(verdict.tokens.tolist(), verdict.accepted.tolist(), strict=True)]
    for position in range(BLOCK):  # continue token by token from the source
        short = torch.tensor([len(block) <= position for block in blocks])
        p = torch.stack([source(tuple(block[:position])) for block in blocks])  # (trials, vocab)
        drawn = draw(p, random, rows=short).tolist()
        blocks = [block + [x] if len(block) <= position else block for block, x in zip(blocks, drawn, strict=True)]
    cells = torch.tensor([a * VOCAB**2 + b * VOCAB + c for a, b, c, *_ in blocks])
    return chi_square_test(torch.bincount(cells, minlength=VOCAB**BLOCK), exact_blocks(), false_alarm=false_alarm)
