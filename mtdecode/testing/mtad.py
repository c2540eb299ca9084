"""Checks for MTAD (`mtdecode.strategies.mtad`) that do not trust its own numbers.

`check_threshold_rule` replays a `generate` result step by step. For each step it takes the
block the draft proposed (`Step.proposal`), recomputes the joint likelihoods P and Q of
every prefix with plain forward passes of both models, and asserts the acceptance rule:
the accepted prefix y_1..y_n passes (P/Q > tau, or n = 0) and no longer prefix of the
block does.
"""

import math
from collections.abc import Sequence

import torch

from mtdecode.generate import GenerationResult
from mtdecode.model import CausalLM
from mtdecode.sampling import Sampler
from mtdecode.strategies.mtad import judged
from mtdecode.tensor_types import Float, Tensor

#: ratios closer than this to log(tau) are too close to call after a change of batch shape
TIE = 1e-9


def prefix_log_ratios(
    target, draft, context: Sequence[int], block: Sequence[int], sampler: Sampler
) -> Float[Tensor, " k"]:
    """log P(y_1..n) - log Q(y_1..n) for n = 1..k, from one plain forward of each model over context + block."""
    ids = torch.tensor([list(context) + list(block)])
    rows = torch.arange(len(context) - 1, len(context) + len(block) - 1)  # the rows that predict the block
    tokens = torch.tensor(list(block))
    logs = []
    for model in (target, draft):
        hf = CausalLM.wrap(model).hf
        with torch.no_grad():
            logits = hf(ids.to(hf.device)).logits[0, rows.to(hf.device)].cpu()  # (k, vocab)
        logs.append(judged(sampler, logits)[torch.arange(len(block)), tokens].log())
    return (logs[0] - logs[1]).cumsum(0)


def check_threshold_rule(
    target, draft, prompt: Sequence[int], result: GenerationResult, threshold: float, sampler: Sampler
) -> None:
    """Assert, for every step of `result`, that the accepted prefix passes the joint rule and no longer one does.

    **Raises:** `AssertionError` naming the step and the offending prefix.
    """
    log_tau = math.log(threshold)
    context = list(prompt)
    for i, step in enumerate(result.steps):
        block, n = list(step.proposal), step.accepted
        if block:
            ratios = prefix_log_ratios(target, draft, context, block, sampler).tolist()
            if n > 0 and ratios[n - 1] <= log_tau - TIE:
                raise AssertionError(f"step {i}: accepted {n} tokens but log P/Q = {ratios[n - 1]:.4f} <= log tau")
            cut = len(step.tokens) < n + 1  # EOS or the budget ended the step early
            for m in range(n + 1, len(block) + 1):
                if not cut and ratios[m - 1] > log_tau + TIE:
                    raise AssertionError(
                        f"step {i}: accepted {n} tokens but the longer prefix of {m} passes "
                        f"(log P/Q = {ratios[m - 1]:.4f} > log tau = {log_tau:.4f})"
                    )
        context += list(step.tokens)
