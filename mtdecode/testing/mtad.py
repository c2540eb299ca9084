"""Checks for MTAD (`mtdecode.strategies.mtad`) that do not trust its own numbers.

`check_threshold_rule` replays a `generate` result step by step. For each step it takes the
block the draft proposed (`Step.proposal`), recomputes the joint likelihoods P and Q of
every prefix with plain forward passes of both models (a feature head's q as `head_logits`
recomputes it), and asserts the acceptance rule: the accepted prefix y_1..y_n passes
(P/Q > tau, or n = 0) with the log P/Q the step recorded, and no longer prefix of the block
does.

`check_multi_candidate_rule` does the same for MMTAD (`mtdecode.strategies.mmtad`) over every block a step
verified (`Step.candidates`).

`check_bounded_error` compares the law of MTAD's first k tokens with exact MTJD
(`mtdecode.oracle`) against the bound proved in docs/strategies/mtad.md.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from mtdecode import oracle
from mtdecode.beams import judged
from mtdecode.generate import GenerationResult
from mtdecode.model import CausalLM, Runner
from mtdecode.sampling import Sampler
from mtdecode.strategies import MMTAD
from mtdecode.tensor_types import Float, Int, Tensor
from mtdecode.testing.distribution import block_cells, sampled_run
from mtdecode.testing.tolerance import rounding_tolerance
from mtdecode.zoo.eagle import EagleHead, over_vocabulary

#: one prompt, or one prompt per row
Prompts = Sequence[int] | Sequence[Sequence[int]]


def prefix_log_ratios(
    target, draft, context: Sequence[int], block: Sequence[int], sampler: Sampler
) -> tuple[Float[Tensor, " k"], Float[Tensor, " k"]]:
    """log P(y_1..n) - log Q(y_1..n) for n = 1..k, from one plain forward of each model over context + block,
    and for each n how far rounding alone can move that ratio (ratios closer than that to log tau are too
    close to call after a change of batch shape).

    The rounding allowance: each model's logits may be off by `rounding_tolerance`; a log-softmax moves at
    most twice as far as its logits (log p_i = l_i - logsumexp(l), and logsumexp is 1-Lipschitz in the
    largest component), divided by the temperature; a prefix of n tokens adds n such terms per model.
    """
    ratios, ties = batched_log_ratios(target, draft, [(list(context), list(block))], sampler)[0]
    return ratios, ties


def batched_log_ratios(
    target, draft, pairs: list[tuple[list[int], list[int]]], sampler: Sampler
) -> list[tuple[Float[Tensor, " k"], Float[Tensor, " k"]]]:
    """`prefix_log_ratios` for many (context, block) pairs: one forward per model for each group of pairs
    with the same context and block lengths."""
    return [(log_P - log_Q, slack) for log_P, log_Q, slack in batched_log_joints(target, draft, pairs, sampler)]


def batched_log_joints(
    target, draft, pairs: list[tuple[list[int], list[int]]], sampler: Sampler
) -> list[tuple[Float[Tensor, " k"], Float[Tensor, " k"], Float[Tensor, " k"]]]:
    """For each (context, block) pair: log P(y_1..n) and log Q(y_1..n) for n = 1..k, and how far rounding alone
    can move log P - log Q (`prefix_log_ratios`); one forward per model for each group of pairs with the same
    context and block lengths."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, (context, block) in enumerate(pairs):
        groups.setdefault((len(context), len(block)), []).append(i)
    temperature = sampler.temperature or 1.0  # at temperature 0 both models are judged by the plain softmax
    out: list = [None] * len(pairs)
    for (width, k), members in groups.items():
        ids = torch.tensor([pairs[i][0] + pairs[i][1] for i in members])  # (group, width + k)
        rows = torch.arange(width - 1, width + k - 1)  # the rows that predict the block
        tokens = ids[:, width:]  # (group, k)
        logs, slack = [], torch.zeros(len(members), dtype=torch.float64)
        for model in (target, draft):
            if isinstance(model, EagleHead):  # q from a head reads the target's features: the target's rounding
                logits, model = head_logits(target, model, ids, width), target
            else:
                hf = CausalLM.wrap(model).hf
                with torch.no_grad():
                    logits = hf(ids.to(hf.device)).logits[:, rows.to(hf.device)].cpu()  # (group, k, vocab)
            logs.append(judged(sampler, logits).gather(2, tokens[..., None])[..., 0].log().cumsum(1))
            computed = logits.nan_to_num(0.0, posinf=0.0, neginf=0.0)  # -inf (q = 0 off a head's tokens) is exact
            for j in range(len(members)):
                slack[j] += 2 * rounding_tolerance(model, computed[j], keys=ids.shape[1]) / temperature
        prefix = torch.arange(1, k + 1, dtype=torch.float64)
        for j, i in enumerate(members):
            out[i] = (logs[0][j], logs[1][j], slack[j] * prefix)
    return out


def head_logits(target, head: EagleHead, ids: Int[Tensor, "group fed"], width: int) -> Float[Tensor, "group k vocab"]:
    """q's logits for each token after the first `width` of `ids`, as a head drafts a beam (`mtdecode.beam_q.HeadQ`),
    from plain forwards: the target's features at the context, the head over them (its prediction for x0's
    position), then, token by token, the block's token fed with the feature the head predicted before it."""
    runner = Runner(CausalLM.wrap(target), "target", batch=ids.shape[0])
    device = runner.model.device
    _, features = runner.extend_features(ids[:, :width].to(device))  # (group, width, hidden)
    fed, next_tokens = features[:, :-1].to(head.dtype), ids[:, 1:width].to(device)  # entries (f_t, x_{t+1})
    predicted = []
    with torch.no_grad():
        for j in range(ids.shape[1] - width):
            positions = torch.arange(fed.shape[1], device=device).expand(ids.shape[0], -1)
            newest = head(fed, next_tokens, positions)[:, -1]  # (group, hidden): the prediction for the next position
            predicted.append(over_vocabulary(head, head.logits(newest)))
            fed = torch.cat([fed, newest[:, None]], dim=1)
            next_tokens = torch.cat([next_tokens, ids[:, width + j, None].to(device)], dim=1)
    return torch.stack(predicted, dim=1).cpu()


def check_threshold_rule(
    target,
    draft,
    prompts: Prompts,
    result: GenerationResult,
    threshold: float,
    sampler: Sampler,
) -> None:
    """Assert, for every step of every row of `result`, that the accepted prefix passes the joint rule with the
    log P/Q that the step recorded, and that no longer one passes. `prompts` is the prompt (one row) or one prompt
    per row; `draft` is the draft model or the `EagleHead` that was q.

    **Raises:** `AssertionError` naming the row, the step and the offending prefix.
    """
    log_tau = math.log(threshold)
    rows = [list(prompts)] if prompts and isinstance(prompts[0], int) else [list(p) for p in prompts]
    contexts = [list(p) for p in rows]
    taken = [0] * len(rows)  # steps seen per row
    checked, pairs = [], []
    for step in result.steps:
        if step.proposal:
            checked.append((step, taken[step.row]))
            pairs.append((list(contexts[step.row]), list(step.proposal)))
        contexts[step.row] += list(step.tokens)
        taken[step.row] += 1
    for (step, i), (ratios, ties) in zip(checked, batched_log_ratios(target, draft, pairs, sampler), strict=True):
        ratios, ties, n = ratios.tolist(), ties.tolist(), step.accepted
        where = f"row {step.row}, step {i}"
        if n > 0 and abs(step.log_ratio - ratios[n - 1]) > ties[n - 1]:
            raise AssertionError(f"{where}: the step's log P/Q {step.log_ratio:.6f} is not the recomputed "
                                 f"{ratios[n - 1]:.6f} (rounding allows {ties[n - 1]:.2g})")  # fmt: skip
        if n > 0 and ratios[n - 1] <= log_tau - ties[n - 1]:
            raise AssertionError(f"{where}: accepted {n} tokens but log P/Q = {ratios[n - 1]:.4f} <= log tau")
        cut = len(step.tokens) < n + 1  # EOS or the budget ended the step early
        for m in range(n + 1, len(step.proposal) + 1):
            if not cut and ratios[m - 1] > log_tau + ties[m - 1]:
                raise AssertionError(
                    f"{where}: accepted {n} tokens but the longer prefix of {m} passes "
                    f"(log P/Q = {ratios[m - 1]:.4f} > log tau = {log_tau:.4f})"
                )


def check_multi_candidate_rule(
    target, prompts: Prompts, result: GenerationResult, strategy: MMTAD, sampler: Sampler
) -> None:
    """Assert MMTAD's rule (`mtdecode.strategies.mmtad`) on every step of every row of `result`, from plain forward
    passes of both models over each block the step verified (`Step.candidates`): the kept block (`Step.proposal`)
    passes at the accepted depth n (or n = 0), with the largest P of the blocks that pass there, and no block passes
    deeper. Its draft, tau and denominator are `strategy`'s: Q_d is the heaviest block's (any block whose joint q is
    within rounding of the largest may be it) or the largest at depth d. Ratios within rounding of log tau, and P
    within rounding of the winner's, are not called.

    **Raises:** `AssertionError` naming the row, the step and the block that breaks the rule.
    """
    draft, log_tau = strategy.draft, math.log(strategy.threshold)
    rows = [list(prompts)] if prompts and isinstance(prompts[0], int) else [list(p) for p in prompts]
    contexts, taken, checked, pairs = [list(p) for p in rows], [0] * len(rows), [], []
    for step in result.steps:
        if step.candidates:
            checked.append((step, taken[step.row], len(pairs)))
            pairs += [(list(contexts[step.row]), list(block)) for block in step.candidates]
        contexts[step.row] += list(step.tokens)
        taken[step.row] += 1
    joints = batched_log_joints(target, draft, pairs, sampler)
    for step, i, first in checked:
        where, n, blocks = f"row {step.row}, step {i}", step.accepted, step.candidates
        log_P, log_Q, slack = (torch.stack(part) for part in zip(*joints[first : first + len(blocks)], strict=True))
        tie = slack.max(0).values  # (k,): the largest rounding allowance of any block at each depth
        assert step.proposal in blocks and step.tokens[:n] == step.proposal[:n], f"{where}: kept a block not verified"
        heavy = log_Q[:, -1] >= log_Q[:, -1].max() - tie[-1]  # the blocks that may be the heaviest
        bounds = log_Q[heavy] if strategy.denominator == "heaviest" else log_Q.max(0).values[None]  # (options, k)
        if not any(_obeys(step, log_P, bound, tie, log_tau) for bound in bounds):
            ratios = (log_P - bounds[0]).tolist()
            raise AssertionError(f"{where}: accepted {n} tokens of {step.proposal}, but the blocks {blocks} give "
                                 f"log P - log Q = {ratios} against log tau {log_tau:.4f}")  # fmt: skip


def _obeys(step, log_P, bound, tie, log_tau) -> bool:
    """Whether a step's outcome follows MMTAD's rule with this Q_d (`bound`, per depth)."""
    n, ratio = step.accepted, log_P - bound  # (blocks, k)
    winner = step.candidates.index(step.proposal)
    if n > 0 and (ratio[winner, n - 1] <= log_tau - tie[n - 1] or (
        ((ratio[:, n - 1] > log_tau + tie[n - 1]) & (log_P[:, n - 1] > log_P[winner, n - 1] + tie[n - 1])).any()
    )):  # fmt: skip
        return False  # the winner does not pass at n, or a block that passes there has a clearly larger P
    cut = len(step.tokens) < n + 1  # EOS or the budget ended the step early
    return cut or not bool((ratio[:, n:] > log_tau + tie[n:]).any())  # no block passes deeper


@dataclass(frozen=True)
class BoundCheck:
    """The bounded-error check of MTAD against exact MTJD (see `check_bounded_error`).

    - `measured`: TV between the empirical law of MTAD's first k tokens and exact MTJD.
    - `bound`: the proposition's bound with the measured acceptance rate: TV(A, MTJD) + P(E).
    - `slack`: the sampling allowance for both estimates at the false-alarm rate.
    - `passed`: `measured <= bound + slack`.
    """

    measured: float
    bound: float
    token_by_token_gap: float
    acceptance: float
    slack: float
    samples: int
    false_alarm: float

    @property
    def passed(self) -> bool:
        return self.measured <= self.bound + self.slack

    def __str__(self) -> str:
        verdict = "within" if self.passed else "OUTSIDE"
        return (
            f"TV(M, MTJD) = {self.measured:.4f} {verdict} the bound TV(A, MTJD) + P(E) = "
            f"{self.token_by_token_gap:.4f} + {self.acceptance:.4f} (+ slack {self.slack:.4f}; "
            f"{self.samples} samples, false-alarm rate {self.false_alarm:g})"
        )


def check_bounded_error(
    target,
    draft,
    prompt: Sequence[int],
    strategy,
    *,
    k: int,
    sampler: Sampler,
    samples: int = 20_000,
    false_alarm: float = 1e-3,
    batch: int = 5_000,
) -> BoundCheck:
    """Compare the first k tokens of MTAD or MMTAD with exact MTJD at the sampler's temperature
    (docs/strategies/mtad.md).

    The proposition there: TV(M, MTJD) <= TV(A, MTJD) + P(E), where M is the law of the strategy's first
    k tokens, A that of token-by-token sampling with the same Sampler (both enumerated exactly
    here), and E the event that some step accepts at least one draft token (of any verified block).

    Every step of every run must also pass `check_threshold_rule` (MTAD) or `check_multi_candidate_rule`
    (MMTAD, with its denominator).

    From N seeded runs, the empirical law M_N and the rate of E are estimated. With
    probability at least 1 - false_alarm both of these hold (each fails with probability at
    most false_alarm / 2):

    - TV(M_N, M) <= sqrt(V^k / N) / 2 + sqrt(ln(2 / false_alarm) / (2N)): the expectation
      bound follows from Cauchy-Schwarz, the deviation from McDiarmid's inequality (one run
      moves TV by at most 1/N);
    - P(E) <= rate + sqrt(ln(2 / false_alarm) / (2N)) (Hoeffding).

    Then the triangle inequality gives TV(M_N, MTJD) <= TV(A, MTJD) + rate + slack, and
    `passed` is False with probability at most `false_alarm` when the proposition holds.
    """
    vocab = CausalLM.wrap(target).vocab_size
    cells = vocab**k
    counts = torch.zeros(cells, dtype=torch.float64)
    accepted_runs = 0
    for start in range(0, samples, batch):  # the runs are the rows of batched calls (row b: seed start + b)
        rows = min(batch, samples - start)
        result = sampled_run(target, [list(prompt)] * rows, strategy, k, sampler, seed=start)
        if isinstance(strategy, MMTAD):  # every block a step verified
            check_multi_candidate_rule(target, [list(prompt)] * rows, result, strategy, sampler)
        else:
            check_threshold_rule(target, draft, [list(prompt)] * rows, result, strategy.threshold, sampler)
        counts += torch.bincount(block_cells(result.tokens, vocab), minlength=cells).double()
        accepted = torch.zeros(rows, dtype=torch.bool)
        for step in result.steps:
            accepted[step.row] |= step.accepted > 0
        accepted_runs += int(accepted.sum())
    exact = oracle.mtjd(target, prompt, k, sampler.temperature)
    token_by_token = oracle.token_by_token_joint(target, prompt, k, sampler)
    deviation = math.sqrt(math.log(2 / false_alarm) / (2 * samples))
    return BoundCheck(
        measured=0.5 * float((counts / samples - exact).abs().sum()),
        bound=0.5 * float((token_by_token - exact).abs().sum()) + accepted_runs / samples,
        token_by_token_gap=0.5 * float((token_by_token - exact).abs().sum()),
        acceptance=accepted_runs / samples,
        slack=0.5 * math.sqrt(cells / samples) + 2 * deviation,
        samples=samples,
        false_alarm=false_alarm,
    )
