"""The oracle at the kernel level, with no model: speculative rejection samplers and beam samplers.

**Rejection samplers.** `check_rejection_sampler(fn)` checks a function

    fn(p: Float[Tensor, "k_plus_1 vocab"], q: Float[Tensor, "k vocab"], drafted: Int[Tensor, " k"]) -> list[int]

that takes the target's distributions p_1..p_{k+1} (p_i after the drafted tokens d_1..d_{i-1}),
the draft's q_1..q_k and the drafted tokens (each d_i drawn from q_i), and returns the accepted
tokens plus one more (Leviathan et al. 2023, Algorithm 1). Its randomness comes from torch's
global generator, which the check seeds (inside `torch.random.fork_rng`). A sampler that takes
batches says so (`fn.takes_batches = True`, `fn.batch(p, q, drafted)` with a leading trial axis).

The check builds synthetic sources of many shapes (`SCENARIOS`): generic distributions, zeros in
p, zeros in q (q = 0 where p > 0), ties, p == q (a zero residual), a one-hot p, a one-hot q, a
near one-hot p, and disjoint supports of p and q. It also fails a sampler that changes p, q or the
drafted tokens in place. Each trial draws the draft tokens from q,
calls `fn`, checks the contract (the tokens before the last are the drafted prefix; a last token
at a rejected position differs from the drafted one; a full acceptance brings its bonus token),
and continues the output token by token from the source to k + 1 tokens. The law of those
blocks must be the source's exact joint law: a chi-square test per scenario, at
`false_alarm / len(SCENARIOS)` each. `ours` and `transformers_rejection_sampler` adapt mtdecode's
and transformers' samplers to the signature.

**Beam samplers.** `check_beam_sampler(choose)` checks MTAD's beam-sampling draw
(`mtdecode.beams.choose`'s signature): W options drawn without replacement with
probability proportional to exp(score). The law of the first two picks is compared with the
exact law of successive draws.
"""

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import no_type_check

import torch

from mtdecode.sampling import RowRandom
from mtdecode.tensor_types import Float, Int, Tensor
from mtdecode.testing.report import Report
from mtdecode.testing.stats import chi_square_test, detectable_tv


@dataclass(frozen=True)
class Scenario:
    """A synthetic target p and draft q over `vocab` tokens, as functions of the tokens before them.

    `kind` shapes them: "generic", "zeros in p", "zeros in q", "ties", "p == q", "one-hot p" (one-hot at
    every other position), "one-hot q".
    """

    name: str
    kind: str
    vocab: int
    k: int
    seed: int

    def p(self, prefix: tuple[int, ...]) -> Float[Tensor, " vocab"]:
        """The target's distribution after `prefix`."""
        return _distribution(self, "p", prefix)

    def q(self, prefix: tuple[int, ...]) -> Float[Tensor, " vocab"]:
        """The draft's distribution after `prefix`."""
        return _distribution(self, "q", prefix)

    def exact_blocks(self) -> Float[Tensor, " cells"]:
        """P(x_1..x_{k+1}) under p, block (x_1, ..., x_{k+1}) at cell x_1 V^k + ... + x_{k+1}."""
        joint = torch.ones(1, dtype=torch.float64)
        for p_after in _tables(self, "p"):  # rows in the order of the cells' prefixes
            joint = (joint[:, None] * p_after).reshape(-1)
        return joint


def _scores(scenario: Scenario, which: int, prefix: tuple[int, ...]) -> Float[Tensor, " vocab"]:
    generator = torch.Generator().manual_seed(hash((scenario.seed, which, prefix)) % 2**31)
    return 1.5 * torch.randn(scenario.vocab, generator=generator, dtype=torch.float64)


@functools.cache
def _distribution(scenario: Scenario, model: str, prefix: tuple[int, ...]) -> Float[Tensor, " vocab"]:
    """p or q of `scenario` after `prefix` (made once: the trials ask for the same few again and again)."""
    kind, vocab = scenario.kind, scenario.vocab
    if model == "p":
        probs = torch.softmax(_scores(scenario, 1 if kind == "p == q" else 0, prefix), dim=-1)
        if kind == "zeros in p":  # p rules out the tokens q likes most
            probs[torch.softmax(_scores(scenario, 1, prefix), -1).topk(2).indices] = 0.0
        elif kind == "ties":
            probs = torch.full((vocab,), 1.0 / vocab, dtype=torch.float64)
        elif kind == "one-hot p" and len(prefix) % 2 == 0:  # a certain target at every other position
            probs = torch.nn.functional.one_hot(probs.argmax(), vocab).double()
        elif kind == "near one-hot p":  # almost certain: 0.98 on one token, the rest spread thin
            probs = 0.02 * probs + 0.98 * torch.nn.functional.one_hot(probs.argmax(), vocab).double()
        elif kind == "disjoint supports":  # p on the first half of the vocabulary, q on the second
            probs = torch.where(torch.arange(vocab) < vocab // 2, probs, 0.0)
    else:
        probs = torch.softmax(_scores(scenario, 1, prefix), dim=-1)
        if kind == "zeros in q":  # q rules out the tokens p likes most
            probs[scenario.p(prefix).topk(2).indices] = 0.0
        elif kind == "ties":
            probs = (torch.arange(vocab) < vocab // 2).double()
        elif kind == "one-hot q":
            probs = torch.nn.functional.one_hot(probs.argmax(), vocab).double()
        elif kind == "disjoint supports":  # every guess is rejected, and the residual is p itself
            probs = torch.where(torch.arange(vocab) < vocab // 2, 0.0, probs)
    return probs / probs.sum()


SCENARIOS = (
    Scenario("generic", "generic", vocab=5, k=2, seed=0),
    Scenario("zeros in p", "zeros in p", vocab=5, k=2, seed=1),
    Scenario("zeros in q", "zeros in q", vocab=5, k=2, seed=2),
    Scenario("ties", "ties", vocab=4, k=2, seed=3),
    Scenario("p == q", "p == q", vocab=4, k=3, seed=4),
    Scenario("one-hot p", "one-hot p", vocab=4, k=2, seed=5),
    Scenario("one-hot q", "one-hot q", vocab=5, k=1, seed=6),
    Scenario("near one-hot p", "near one-hot p", vocab=4, k=2, seed=7),
    Scenario("disjoint supports", "disjoint supports", vocab=4, k=2, seed=8),
)


def _tables(scenario: Scenario, which: str) -> list[Float[Tensor, "_prefix vocab"]]:
    """The scenario's p (`which` "p", positions 1..k+1) or q ("q", positions 1..k) after every prefix: table i holds
    the distribution after each of the V^i prefixes of i tokens, prefix (x_1, ..., x_i) at row x_1 V^(i-1) + ... +
    x_i (so that a block's row is found by arithmetic, not by a call per trial)."""
    made = scenario.p if which == "p" else scenario.q
    tables, prefixes = [], [()]
    for _ in range(scenario.k + (which == "p")):
        tables.append(torch.stack([made(prefix) for prefix in prefixes]))
        prefixes = [prefix + (x,) for prefix in prefixes for x in range(scenario.vocab)]
    return tables


def _rows(tokens: Int[Tensor, "trial i"], vocab: int) -> Int[Tensor, " trial"]:
    """Each trial's row in a `_tables` table of its prefix `tokens`."""
    powers = vocab ** torch.arange(tokens.shape[1] - 1, -1, -1)
    return (tokens * powers).sum(1)


def _draw(
    tables: list[Float[Tensor, "_prefix vocab"]], tokens: Int[Tensor, "trial done"], i: int, vocab: int
) -> Int[Tensor, " trial"]:
    """Position i + 1's token for every trial, drawn from the table's distribution after its first i tokens
    (torch's global generator; one draw per trial)."""
    return torch.multinomial(tables[i][_rows(tokens[:, :i], vocab)], 1)[:, 0]


class ContractError(Exception):
    """The sampler returned something that cannot be "the accepted tokens plus one more"."""


@no_type_check  # plain lists, per draw (see `mtdecode.tensor_types`)
def check_contract(output, drafted: list[int], vocab: int) -> list[int]:
    """The output as a list, or `ContractError` saying which rule it breaks."""
    tokens = output.tolist() if isinstance(output, Tensor) else list(output)
    k = len(drafted)
    if not tokens or len(tokens) > k + 1 or not all(isinstance(t, int) and 0 <= t < vocab for t in tokens):
        raise ContractError(f"returned {tokens} for {k} drafted tokens: expected 1 to {k + 1} token ids")
    if tokens[:-1] != drafted[: len(tokens) - 1]:
        raise ContractError(f"returned {tokens}: the tokens before the last must be the drafted prefix of {drafted}")
    if len(tokens) <= k and tokens[-1] == drafted[len(tokens) - 1]:
        raise ContractError(
            f"returned {tokens} for the drafted {drafted}: it ends on drafted token {tokens[-1]} with nothing after "
            "it, so either the bonus token is missing (every guess was accepted) or a rejected guess came back as "
            "the correction (the residual max(0, p - q) is 0 there)"
        )
    return tokens


def check_rejection_sampler(
    fn: Callable,
    *,
    trials: int = 10_000,
    false_alarm: float = 1e-3,
    scenarios: Sequence[Scenario] = SCENARIOS,
    seed: int = 0,
) -> Report:
    """The law of `fn`'s outputs on synthetic targets and drafts of many shapes (see the module docstring).

    **Returns:** a `Report`; each scenario's test runs at `false_alarm / len(scenarios)`, so a correct
    sampler fails with probability at most `false_alarm`. The check stops at the first scenario that fails.
    """
    name = getattr(fn, "__qualname__", None) or repr(fn)
    alpha = false_alarm / len(scenarios)
    results, failed = [], []
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for scenario in scenarios:
            vocab, k = scenario.vocab, scenario.k
            p_after, q_after = _tables(scenario, "p"), _tables(scenario, "q")
            drafted = torch.zeros(trials, k, dtype=torch.long)
            for i in range(k):  # d_i ~ q_i, after the drafted tokens before it
                drafted[:, i] = _draw(q_after, drafted, i, vocab)
            p = torch.stack([p_after[i][_rows(drafted[:, :i], vocab)] for i in range(k + 1)], dim=1)
            q = torch.stack([q_after[i][_rows(drafted[:, :i], vocab)] for i in range(k)], dim=1)
            drafts = drafted.tolist()
            given = (p.clone(), q.clone(), drafted.clone())
            if getattr(fn, "takes_batches", False):  # one call for every trial
                outputs = fn.batch(p, q, drafted)
            else:
                outputs = [fn(p[t], q[t], drafted[t]) for t in range(trials)]
            inputs = zip(("p", "q", "drafted"), given, (p, q, drafted), strict=True)
            changed = [n for n, before, after in inputs if not before.equal(after)]
            if changed:  # a later draw would read what this one wrote (vllm-project/vllm-ascend#2881)
                summary = (
                    f"check_rejection_sampler FAILED: {name} changed its input {' and '.join(changed)} in place "
                    f"({scenario.name}): the next draw that reads it sees another distribution."
                )
                return Report("check_rejection_sampler", False, summary, {"scenario": scenario.name})
            blocks = torch.full((trials, k + 1), -1, dtype=torch.long)  # each output, -1 after its end
            for t, (output, draft) in enumerate(zip(outputs, drafts, strict=True)):
                try:
                    block = check_contract(output, draft, vocab)
                except ContractError as error:
                    summary = f"check_rejection_sampler FAILED: {name} broke the contract ({scenario.name}): {error}."
                    return Report("check_rejection_sampler", False, summary, {"scenario": scenario.name})
                blocks[t, : len(block)] = torch.tensor(block)
            for i in range(k + 1):  # continue each block token by token from the source, to k + 1 tokens
                short = blocks[:, i] < 0
                blocks[short, i] = _draw(p_after, blocks[short], i, vocab)
            counts = torch.bincount(_rows(blocks, vocab), minlength=vocab ** (k + 1))
            fit = chi_square_test(counts, scenario.exact_blocks(), false_alarm=alpha)
            epsilon = detectable_tv(trials, fit.dof, alpha)
            results.append({"scenario": scenario.name, **vars(fit), "passed": fit.passed, "detectable_tv": epsilon})
            if not fit.passed:
                failed.append((scenario, fit))
                break  # one failing source settles the verdict; the others would only cost time
    power = max(r["detectable_tv"] for r in results)
    figures = {"trials": trials, "false_alarm": false_alarm, "detectable_tv": power, "scenarios": results}
    strength = (
        f"A correct sampler fails with probability at most {false_alarm:g} (chi-square at {alpha:.2g} per "
        f"scenario); a law at total-variation distance {power:.3f} or more from the exact one is detected with "
        "probability 0.99."
    )
    shapes = ", ".join(s.name for s in scenarios)
    if not failed:
        summary = (
            f"check_rejection_sampler passed: {name} keeps the target's law exactly on {len(scenarios)} synthetic "
            f"sources ({shapes}), {trials} trials each, the contract held in every trial. " + strength
        )
        return Report("check_rejection_sampler", True, summary, figures)
    scenario, fit = failed[0]
    summary = (
        f"check_rejection_sampler FAILED: {name} does not keep the target's law on the '{scenario.name}' source "
        f"(vocabulary {scenario.vocab}, k = {scenario.k}): {fit}. " + strength
    )
    return Report("check_rejection_sampler", False, summary, figures)


# ---------------------------------------------------------------- adapters


def ours(p: Float[Tensor, "k_plus_1 vocab"], q: Float[Tensor, "k vocab"], drafted: Int[Tensor, " k"]) -> list[int]:
    """mtdecode's speculative rule (`strategies.speculative.accept` and `correct`) behind the kernel signature.
    Its random stream is seeded from torch's global generator. It takes batches (`ours.batch`): every
    trial a row with its own stream."""
    return _ours_batch(p[None], q[None], drafted[None])[0]


def _ours_batch(
    p: Float[Tensor, "trials k_plus_1 vocab"], q: Float[Tensor, "trials k vocab"], drafted: Int[Tensor, "trials k"]
) -> list[list[int]]:
    from mtdecode.strategies import speculative

    trials = drafted.shape[0]
    k = torch.full((trials,), drafted.shape[1])
    random = RowRandom(torch.randint(0, 2**62, (trials,)).tolist())
    rows = torch.ones(trials, dtype=torch.bool)
    accepted = speculative.accept(drafted, p, q, k, random, rows)
    new_token = speculative.correct(p, q, accepted, k, random, rows)
    return [d[:n] + [t] for d, n, t in zip(drafted.tolist(), accepted.tolist(), new_token.tolist(), strict=True)]


ours.takes_batches = True
ours.batch = _ours_batch


def transformers_rejection_sampler(
    p: Float[Tensor, "k_plus_1 vocab"], q: Float[Tensor, "k vocab"], drafted: Int[Tensor, " k"]
) -> list[int]:
    """transformers' `_speculative_sampling` (`transformers.generation.utils`) behind the kernel signature:
    it takes logits, so p and q go in as their logarithms."""
    from transformers.generation.utils import _speculative_sampling

    k = drafted.numel()
    with torch.no_grad():
        tokens, _ = _speculative_sampling(
            candidate_input_ids=drafted[None],
            candidate_logits=q.log()[None],
            candidate_length=k,
            new_logits=p.log()[None],
        )
    return tokens[0].tolist()


# ---------------------------------------------------------------- beam sampling

BEAM_SCORES = (-0.4, -1.1, -1.6, -2.3, -3.0, -0.9)  # log weights of 6 options: a few likely, a few rare


def check_beam_sampler(choose: Callable, *, trials: int = 20_000, false_alarm: float = 1e-3, seed: int = 0) -> Report:
    """The law of the first two picks of `choose(log_scores, width, greedy, random, rows)` (MTAD's beam draw).

    Drawing W options without replacement with probability proportional to exp(score) gives the
    ordered pair (i, j) probability w_i / S x w_j / (S - w_i), with w = exp(score) and S their sum.
    `trials` rows of one call (each with its own random stream) are compared with that law by a
    chi-square test at `false_alarm`.
    """
    name = getattr(choose, "__qualname__", None) or repr(choose)
    scores = torch.tensor(BEAM_SCORES, dtype=torch.float64)
    options = scores.numel()
    picks = choose(
        scores.expand(trials, -1), 2, False, RowRandom(range(seed, seed + trials)), torch.ones(trials, dtype=torch.bool)
    )
    cells = picks[:, 0] * options + picks[:, 1]
    w = scores.exp()
    exact = (w[:, None] / w.sum()) * (w[None, :] / (w.sum() - w[:, None]))
    exact.fill_diagonal_(0.0)
    fit = chi_square_test(torch.bincount(cells, minlength=options**2), exact.flatten(), false_alarm=false_alarm)
    epsilon = detectable_tv(trials, fit.dof, false_alarm)
    figures = {"trials": trials, **vars(fit), "detectable_tv": epsilon}
    verdict = "passed" if fit.passed else "FAILED"
    summary = (
        f"check_beam_sampler {verdict}: the first two of W picks of {name} over {options} options "
        f"{'follow' if fit.passed else 'do not follow'} successive draws without replacement proportional to "
        f"exp(score): {fit} ({trials} trials; a law at total-variation distance {epsilon:.3f} or more is "
        "detected with probability 0.99)."
    )
    return Report("check_beam_sampler", fit.passed, summary, figures)
