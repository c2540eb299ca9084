"""Distribution preservation: a sampling strategy must produce blocks of tokens distributed
exactly as `Autoregressive` sampling with the same Sampler.

`exact_joint` enumerates that distribution over all V^n blocks of the next n tokens (one
batched forward per level, so it is exact and cheap for a tiny vocabulary).
`sample_counts` runs the strategy many times with seeds 0, 1, 2, ... (as the rows of a few
batched calls) and counts the blocks. `check_distribution` compares the two with `chi_square_test` at a stated
false-alarm rate.
"""

from collections.abc import Sequence

import torch

from mtdecode.generate import generate
from mtdecode.model import CausalLM
from mtdecode.oracle import token_by_token_joint
from mtdecode.sampling import Sampler
from mtdecode.strategy import DecodingStrategy
from mtdecode.tensor_types import Float, Int, Tensor
from mtdecode.testing.stats import GoodnessOfFit, chi_square_test


def exact_joint(model, prompt: Sequence[int], n: int, sampler: Sampler) -> Float[Tensor, " cells"]:
    """P(x_1..x_n | prompt) when each token is drawn from `sampler.probs` in turn, for every block
    (`mtdecode.oracle.token_by_token_joint`; block (x_1, ..., x_n) is cell x_1 V^(n-1) + ... + x_n).

    **Raises:** `ValueError` if V^n exceeds 65,536 cells.
    """
    return token_by_token_joint(model, prompt, n, sampler)


def sampled_run(
    model,
    prompt: Sequence[int] | Sequence[Sequence[int]],
    strategy: DecodingStrategy,
    n: int,
    sampler: Sampler,
    seed: int,
):
    """One seeded `generate` call of n tokens with the Sampler's settings (one prompt, or a batch: row b is
    seeded `seed + b`); returns its `GenerationResult`."""
    return generate(
        model,
        list(prompt),
        strategy,
        max_new_tokens=n,
        temperature=sampler.temperature,
        top_k=sampler.top_k,
        top_p=sampler.top_p,
        seed=seed,
    )


def sample_counts(
    model,
    prompt: Sequence[int],
    strategy: DecodingStrategy,
    n: int,
    samples: int,
    sampler: Sampler,
    *,
    first_seed: int = 0,
    batch: int = 5_000,
) -> Int[Tensor, " cells"]:
    """Run `strategy` `samples` times (seeds first_seed, first_seed + 1, ...) for n tokens; count each block.

    The runs are the rows of batched calls of up to `batch` rows: row b of a call seeded s draws
    exactly what a single run seeded s + b draws, so these are the same trials as `samples`
    separate calls, made in a fraction of the time.
    """
    vocab = CausalLM.wrap(model).vocab_size
    counts = torch.zeros(vocab**n, dtype=torch.long)
    for start in range(0, samples, batch):
        rows = min(batch, samples - start)
        result = sampled_run(model, [list(prompt)] * rows, strategy, n, sampler, seed=first_seed + start)
        counts += torch.bincount(block_cells(result.tokens, vocab), minlength=vocab**n)
    return counts


def block_cells(tokens: Int[Tensor, "runs n"], vocab: int) -> Int[Tensor, " runs"]:
    """The cell of each run's block (x_1, ..., x_n): x_1 V^(n-1) + ... + x_n."""
    weights = vocab ** torch.arange(tokens.shape[1] - 1, -1, -1)
    return (tokens.cpu() * weights).sum(1)


def check_distribution(
    model,
    prompt: Sequence[int],
    strategy: DecodingStrategy,
    *,
    n: int,
    sampler: Sampler,
    samples: int = 20_000,
    false_alarm: float = 1e-3,
) -> GoodnessOfFit:
    """Chi-square test of `strategy`'s n-token blocks against exact token-by-token sampling.

    If the strategy preserves the distribution, `.passed` is False with probability
    `false_alarm` (see `mtdecode.testing.stats`).
    """
    expected = exact_joint(model, prompt, n, sampler)
    counts = sample_counts(model, prompt, strategy, n, samples, sampler)
    return chi_square_test(counts, expected, false_alarm=false_alarm)
