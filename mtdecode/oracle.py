"""Exact multi-token joint decoding (MTJD) by enumeration, for tiny vocabularies.

MTJD with block size k picks the next k tokens from the target's joint distribution
P(y_1..y_k | x) = prod_j p(y_j | x, y_<j). At temperature T the block is drawn from
P^(1/T), renormalised over all V^k blocks; as T -> 0 that is the single most likely block.
At T = 1 without truncation it equals token-by-token sampling; tempering the joint and
tempering each token differ, which is where MTJD's lower perplexity comes from.

Enumeration costs V^k target evaluations (one batched forward per level), so it is for
tests on tiny models: MTAD (`mtdecode.strategies.mtad`) is checked against it.
"""

from collections.abc import Sequence

import torch

from mtdecode.model import CausalLM
from mtdecode.sampling import Sampler
from mtdecode.tensor_types import Float, Tensor

#: the largest number of blocks `token_by_token_joint` will enumerate
MAX_BLOCKS = 1 << 16


def token_by_token_joint(model, prefix: Sequence[int], k: int, sampler: Sampler) -> Float[Tensor, " blocks"]:
    """P(y_1..y_k | prefix) when each token is drawn from `sampler.probs` in turn, for every block.

    Block (y_1, ..., y_k) is entry y_1 V^(k-1) + ... + y_k (lexicographic order).

    **Raises:** `ValueError` if V^k exceeds `MAX_BLOCKS`.
    """
    adapter = CausalLM.wrap(model)
    hf, vocab = adapter.hf, adapter.vocab_size
    if vocab**k > MAX_BLOCKS:
        raise ValueError(f"{vocab}^{k} blocks is too many to enumerate (limit {MAX_BLOCKS}); use a tiny vocabulary")
    contexts = torch.tensor([list(prefix)], device=hf.device)  # (blocks so far, length)
    joint = torch.ones(1, dtype=torch.float64, device=hf.device)  # (blocks so far,)
    for _ in range(k):
        with torch.no_grad():
            logits = hf(contexts).logits[:, -1]  # (blocks, vocab)
        p = sampler.probs(logits.double())  # (blocks, vocab)
        joint = (joint[:, None] * p).reshape(-1)  # (blocks * vocab,)
        tokens = torch.arange(vocab, device=hf.device).repeat(contexts.shape[0])[:, None]
        contexts = torch.cat([contexts.repeat_interleave(vocab, 0), tokens], dim=1)
    return joint.cpu()


def mtjd(model, prefix: Sequence[int], k: int, temperature: float) -> Float[Tensor, " blocks"]:
    """The exact MTJD distribution over all V^k blocks: P^(1/T) renormalised (one-hot on the mode at T = 0)."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    joint = token_by_token_joint(model, prefix, k, Sampler(temperature=1.0))  # untempered P
    if temperature == 0:
        return torch.nn.functional.one_hot(joint.argmax(), joint.numel()).double()
    log_joint = joint.log() / temperature
    return torch.softmax(log_joint, dim=0)


def most_likely_block(model, prefix: Sequence[int], k: int) -> list[int]:
    """argmax over all V^k blocks of P(y_1..y_k | prefix), as a list of k tokens."""
    vocab = CausalLM.wrap(model).vocab_size
    cell = int(token_by_token_joint(model, prefix, k, Sampler(temperature=1.0)).argmax())
    return [cell // vocab ** (k - 1 - j) % vocab for j in range(k)]
