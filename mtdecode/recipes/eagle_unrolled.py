"""Training-time test (EAGLE-3; HASS's context alignment) and HASS's top-K distillation: the losses that were
measured against EAGLE-1's and left out of the recipe (docs/strategies/eagle-training.md), kept for
`benchmarks/eagle3_pilot.py`, which trains heads with them side by side, and for anyone who trains a head of
their own. `chain_hits` scores a head's chains on held-out data the same way for every variant."""

import torch
from einops import repeat

from mtdecode.tensor_types import Bool, Float, Int, Tensor
from mtdecode.zoo.eagle import EagleHead

#: training-time test (EAGLE-3): depth d of an unrolled draft weighs DEPTH_DECAY ** (d - 1) in the loss
DEPTH_DECAY = 0.8


def distill_loss(
    head: EagleHead,
    predicted: Float[Tensor, "batch chain hidden"],
    target: Float[Tensor, "batch chain hidden"],
    top_k: int | None = None,
) -> Float[Tensor, ""]:
    """`token_loss` against any target features: the cross-entropy of the head's distribution (from `predicted`)
    against the target's (its output layer on `target`, on the head's tokens). With `top_k`, only the target's k
    likeliest tokens count, each with its probability (HASS's top-K distillation: the guesses that can be accepted
    are among them). A mean over positions."""
    p = torch.softmax(head.logits(target).float(), dim=-1)  # (batch, chain, head tokens)
    if top_k is not None:
        kept = p.topk(top_k, dim=-1)
        p = torch.zeros_like(p).scatter(-1, kept.indices, kept.values)
    log_q = torch.log_softmax(head.logits(predicted).float(), dim=-1)
    return -(p * log_q).sum(-1).mean()


def depth_mask(chains: int, depths: int, device: torch.device | str = "cpu") -> Bool[Tensor, "query key"]:
    """What each entry of an unrolled draft sees (`unrolled`), entries laid out depth by depth, `chains` per depth: an
    entry of chain t at depth a sees depth 1's entries up to chain t (the head's entries for the target's features
    up to position t, as its cache holds them when drafting) and its own chain's entries at depths 2..a."""
    tril = torch.ones(chains, chains, dtype=torch.bool, device=device).tril()
    eye = torch.eye(chains, dtype=torch.bool, device=device)
    mask = torch.zeros(depths * chains, depths * chains, dtype=torch.bool, device=device)
    for a in range(depths):
        rows = slice(a * chains, (a + 1) * chains)
        mask[rows, :chains] = tril
        for b in range(1, a + 1):  # the chain's own deeper entries, itself included
            mask[rows, b * chains : (b + 1) * chains] = eye
    return mask


def unrolled(
    head: EagleHead, features: Float[Tensor, "batch seq hidden"], tokens: Int[Tensor, "batch seq"], depths: int
) -> list[Float[Tensor, "batch chain hidden"]]:
    """Training-time test (EAGLE-3; HASS calls it context alignment): the head drafts `depths` deep from every
    position of the sequences at once, fed its own predicted features as when it drafts. Chain t starts from the
    target's f_t: depth 1 reads (f_t, x_{t+1}) at position t, as the head's forward does; depth d > 1 reads (its
    depth d - 1 prediction, x_{t+d}) at position t + d - 1 and sees what it would see in a draft (`depth_mask`).
    The chain's tokens are the target's: a draft is accepted only as far as its tokens are the target's.

    **Returns:** for d = 1..`depths`, the predictions `(batch, seq - 1, hidden)`: entry t is f'_{t+d}, which
    stands for the target's f_{t+d} where t + d < seq.
    """
    batch, seq, _ = features.shape
    chains, device = seq - 1, features.device
    start = torch.arange(chains, device=device)
    ahead = torch.cat([tokens, tokens.new_zeros(batch, depths)], dim=1)  # past the end: any token (never scored)
    inputs, fed, places, predicted = [features[:, :-1]], [], [], []
    for d in range(1, depths + 1):
        fed.append(ahead[:, d : d + chains])  # x_{t+d}
        places.append(start + d - 1)
        if d > 1:
            inputs.append(predicted[-1])
        mask = repeat(depth_mask(chains, d, device), "query key -> batch 1 query key", batch=batch)
        positions = repeat(torch.cat(places), "entry -> batch entry", batch=batch)
        out = head(torch.cat(inputs, dim=1), torch.cat(fed, dim=1), positions, mask)
        predicted.append(out[:, -chains:])  # the earlier depths' entries come out as before (they never see later)
    return predicted


def unrolled_loss(
    head: EagleHead,
    features: Float[Tensor, "batch seq hidden"],
    tokens: Int[Tensor, "batch seq"],
    depths: int,
    top_k: int | None = None,
) -> Float[Tensor, ""]:
    """EAGLE-3's loss: the token loss (`distill_loss`, no feature loss) of every depth of an `unrolled` draft,
    depth d weighing `DEPTH_DECAY` ** (d - 1), each over the chains whose f_{t+d} is known."""
    total = features.new_zeros(())
    for d, predicted in enumerate(unrolled(head, features, tokens, depths), start=1):
        known = features.shape[1] - d  # chains t with t + d < seq
        total = total + DEPTH_DECAY ** (d - 1) * distill_loss(head, predicted[:, :known], features[:, d:], top_k)
    return total


def chain_hits(head: EagleHead, record: dict, depths: int) -> tuple[Int[Tensor, " depth"], int]:
    """Held out, teacher forced up to each answer position, then the head's own features (`unrolled`): at how many
    answer positions the head's first d guesses are all the target's tokens, for d = 1..`depths`, out of how many
    positions have `depths` tokens after them."""
    tokens, n = record["tokens"], record["tokens"].shape[0]
    with torch.no_grad():
        predicted = unrolled(head, record["features"][None].float(), tokens[None], depths)
    chains = n - 1 - depths  # chain t guesses x_{t+2}..x_{t+depths+1}
    right = torch.stack([
        head.head_token_ids[head.logits(p[0, :chains]).argmax(-1)] == tokens[1 + d : 1 + d + chains]
        for d, p in enumerate(predicted, start=1)
    ])  # fmt: skip
    answer = torch.arange(chains) + 2 >= record["answer_start"]
    held = right.cumprod(0).bool() & answer  # (depth, chain): guesses 1..d all right
    return held.sum(1), int(answer.sum())
