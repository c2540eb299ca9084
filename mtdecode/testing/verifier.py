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

from collections.abc import Callable

import torch

from mtdecode.sampling import draw
from mtdecode.tensor_types import Float, Tensor
from mtdecode.testing.stats import GoodnessOfFit, chi_square_test

VOCAB = 6
BLOCK = 3
CANDIDATES = ((2, 4), (2, 1), (5, 0))


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
    against the source's exact distribution of the first 3 tokens."""
    candidates = torch.tensor(CANDIDATES)
    first = source(())
    after = torch.stack([torch.stack([source(tuple(c[: k + 1])) for k in range(len(c))]) for c in CANDIDATES])
    generator = torch.Generator().manual_seed(seed)
    counts = torch.zeros(VOCAB**BLOCK, dtype=torch.long)
    for _ in range(samples):
        tokens = list(verify(first, after, candidates, generator).tokens)
        while len(tokens) < BLOCK:  # continue token by token from the source
            tokens.append(int(draw(source(tuple(tokens)), generator)))
        a, b, c = tokens[:BLOCK]
        counts[a * VOCAB**2 + b * VOCAB + c] += 1
    return chi_square_test(counts, exact_blocks(), false_alarm=false_alarm)
