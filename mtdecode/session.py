"""What one `generate` call shares with its strategy: each row's committed tokens, the models'
runners and caches, the Sampler and the rows' random streams.

A batch of prompts is decoded side by side, one target forward pass per step for all rows.
Rows accept different numbers of tokens per step and finish at different times; the session
keeps each row's own tokens, budget and EOS, and a finished row stays in the batch as a
masked slot whose work is thrown away. After each step it tells the runners which rows are still
read (`Runner.rows_read`), and the MLPs and output layers of the models `load_model` loads skip
the finished rows' slots (`mtdecode.tokenwise`).

The invariant every strategy keeps, checked after every step: **each cache holds every
unfinished row's committed tokens except the newest one, and nothing pending.** The newest
committed token has not been fed to any model yet; it is the input of the next forward pass.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import no_type_check

import torch
from transformers import PreTrainedModel

from mtdecode.model import CausalLM, Runner
from mtdecode.sampling import RowRandom, Sampler
from mtdecode.tensor_types import Bool, Float, Int, Tensor


@no_type_check  # plain ints, one per row per step, made by `Session.commit` from lists (see `mtdecode.tensor_types`)
@dataclass(frozen=True)
class Step:
    """What one target forward pass committed in one row.

    - `tokens`: the tokens it added to the row's output, in order (at least one).
    - `drafted`: how many guessed tokens that forward verified (0 for plain decoding).
    - `accepted`: how many of those guesses it kept; the last token of `tokens` is the
      target's own (a correction or a bonus token), unless EOS or the budget cut the step.
    - `proposal`: the guessed block the target verified, if the strategy records it (MTAD does; MMTAD records the
      block it kept a prefix of).
    - `log_ratio`: for strategies that accept by likelihood (MTAD), log P/Q of the accepted prefix.
    - `row`: the batch row (0 for a single prompt).
    - `candidates`: every block the target verified, if the strategy records them (MMTAD does).
    """

    tokens: tuple[int, ...]
    drafted: int = 0
    accepted: int = 0
    proposal: tuple[int, ...] = ()
    log_ratio: float | None = None
    row: int = 0
    candidates: tuple[tuple[int, ...], ...] = ()


@dataclass(frozen=True)
class Choice:
    """What a tuned strategy chose in one `generate` call, and why: one entry of `Stats.choices`.

    - `strategy`: the strategy's name, e.g. `"Lookahead"`.
    - `setting`: what it chose, e.g. `"W=4, N=3, G=4"` or `"decodes greedily"`.
    - `reason`: why, in one line: the prediction, the measured costs or the running counts behind it.
    - `greedy`: the whole run decoded greedily (one token per target forward, as `Autoregressive`) because
      of this choice; `generate` then warns once with `GreedyFallbackWarning`.

    `str(choice)` is the one-line sentence `"strategy: setting: reason"`.
    """

    strategy: str
    setting: str
    reason: str
    greedy: bool = False

    def __str__(self) -> str:
        return f"{self.strategy}: {self.setting}: {self.reason}"


class InvariantError(RuntimeError):
    """A strategy left a cache out of step with the committed tokens (a bug in the strategy)."""


class Session:
    """The state of one `generate` call, handed to `DecodingStrategy.decode`.

    **Attributes:**

    - `target`: the target model's `Runner` (its adapter and its KV cache).
    - `sampler`: the shared `Sampler`; `sampler.probs(logits)` is the target distribution p.
    - `random`: the rows' random streams; every draw a strategy makes must use them.
    - `tokens`: for each row, its prompt followed by its committed new tokens.
    - `finished`: for each row, whether its budget is spent or it committed an EOS token.
    - `done`: every row has finished.
    - `choices`: what a tuned strategy chose and why, for `Stats.choices` (`record_choice`).
    """

    def __init__(
        self,
        target: CausalLM,
        prompts: Sequence[Sequence[int]],
        *,
        sampler: Sampler,
        random: RowRandom,
        max_new_tokens: int,
        eos_token_ids: frozenset[int] = frozenset(),
    ) -> None:
        self.sampler = sampler
        self.random = random
        self.tokens = [list(prompt) for prompt in prompts]
        self.prompt_lengths = [len(prompt) for prompt in prompts]
        self.max_new_tokens = max_new_tokens
        self.eos_token_ids = eos_token_ids
        self.steps: list[Step] = []
        self.choices: list[Choice | Callable[[], Choice]] = []
        self.finished = [max_new_tokens == 0] * len(self.tokens)
        self.finished_after = [0] * len(self.tokens)  # target forwards when the row finished
        self.row_steps = [0] * len(self.tokens)  # steps recorded per row
        self.device = target.device
        self.runners: list[Runner] = []
        self.resting: set[int] = set()  # ids of drafts allowed to lag behind the committed tokens (`read_later`)
        self.target = self.runner(target, role="target")

    # ---------------------------------------------------------------- the rows

    @property
    @no_type_check  # plain ints, called per row per step (see `mtdecode.tensor_types`)
    def batch(self) -> int:
        return len(self.tokens)

    @property
    @no_type_check
    def done(self) -> bool:
        return all(self.finished)

    @property
    def active(self) -> Bool[Tensor, " batch"]:
        """Rows still decoding."""
        return torch.tensor([not f for f in self.finished], device=self.device)

    @property
    def remaining(self) -> Int[Tensor, " batch"]:
        """How many more tokens each row's budget allows (0 once it finished)."""
        left = [0 if f else self.max_new_tokens - self.generated(b) for b, f in enumerate(self.finished)]
        return torch.tensor(left, dtype=torch.long, device=self.device)

    def budget(self, guesses: int) -> Int[Tensor, " batch"]:
        """Guesses each row may make this step: at most `guesses`, and no more than its budget leaves
        room for besides the step's own token (0 for a finished row)."""
        return (self.remaining - 1).clamp(min=0, max=guesses)

    @property
    def lengths(self) -> Int[Tensor, " batch"]:
        """Committed tokens of each row, prompt included (the position of its next token)."""
        return torch.tensor([len(row) for row in self.tokens], dtype=torch.long, device=self.device)

    @no_type_check
    def generated(self, row: int) -> int:
        return len(self.tokens[row]) - self.prompt_lengths[row]

    @no_type_check
    def new_tokens(self, row: int) -> list[int]:
        return self.tokens[row][self.prompt_lengths[row] :]

    @property
    def last_tokens(self) -> Int[Tensor, " batch"]:
        """x0 of every row: its newest committed token."""
        return torch.tensor([row[-1] for row in self.tokens], dtype=torch.long, device=self.device)

    def unread(self, runner: Runner) -> list[list[int]]:
        """Each row's committed tokens `runner`'s model has not read yet: the whole prompt at first, then x0."""
        held = runner.cache.lengths.tolist()
        return [row[n:] for row, n in zip(self.tokens, held, strict=True)]

    def record_choice(self, choice: Choice | Callable[[], Choice]) -> None:
        """Record what a tuned strategy chose and why, for `Stats.choices`: a `Choice` made before decoding, or,
        for a choice made step by step from running counts, a function that words it; `generate` calls that
        function once, after the last step (a strategy's generator may be closed before its own code runs on)."""
        self.choices.append(choice)

    def chosen(self) -> tuple[Choice, ...]:
        """The recorded choices, worded now (`record_choice`)."""
        return tuple(c if isinstance(c, Choice) else c() for c in self.choices)

    # ---------------------------------------------------------------- the models

    def runner(self, model: CausalLM, role: str) -> Runner:
        """A fresh runner (model + empty cache) whose cache is checked with the target's."""
        if model.device != self.device:
            raise ValueError(
                f"the {role} model is on {model.device} but the target is on {self.device}; put both on one device"
            )
        runner = Runner(model, role, batch=self.batch)
        self.runners.append(runner)
        return runner

    def draft_runner(self, draft: CausalLM | PreTrainedModel) -> Runner:
        """A runner for a draft model, after checking that it shares the target's vocabulary (and device)."""
        draft = CausalLM.wrap(draft)
        if draft.vocab_size != self.target.model.vocab_size:
            raise ValueError(
                f"the draft's vocabulary ({draft.vocab_size} tokens) differs from the target's "
                f"({self.target.model.vocab_size}); a draft model must share the target's vocabulary"
            )
        return self.runner(draft, role="draft")

    def read_later(self, runner: Runner) -> None:
        """Let `runner` (a draft) lag behind the committed tokens: it reads what it has not read, `unread(runner)`,
        in its next forward, beside the newest token, rather than in a forward of its own now. After a step that
        accepted every guess it has not read the last guess; after a step in which it did not draft, nothing of the
        step. A forward over 2 tokens per row costs about what one over 1 token does, so a draft that guesses well
        saves a forward per step. `check` accepts its shorter cache meanwhile."""
        self.resting.add(id(runner))

    # ---------------------------------------------------------------- committing

    def commit(
        self,
        tokens: Int[Tensor, "batch width"],
        counts: Int[Tensor, " batch"] | int,
        *,
        drafted: Int[Tensor, " batch"] | int = 0,
        accepted: Int[Tensor, " batch"] | int = 0,
        proposals: Sequence[Sequence[int]] | None = None,
        log_ratios: Float[Tensor, " batch"] | None = None,
        candidates: Sequence[Sequence[Sequence[int]]] | None = None,
    ) -> list[Step]:
        """Append row b's first `counts[b]` tokens to its output and record one step per unfinished row.

        A row's tokens are cut after its first EOS token and at its budget; where anything was
        cut, the caches are cropped back to that row's committed tokens, so the invariant holds
        on its last step too. Finished rows are skipped: their tokens are thrown away.

        **Returns:** the steps, one per row that was unfinished (the strategy yields them).
        """
        if self.done:
            raise InvariantError("commit() after generation finished")
        rows = tokens.tolist()
        counts, drafted, accepted = (_per_row(x, self.batch) for x in (counts, drafted, accepted))
        ratios = None if log_ratios is None else log_ratios.tolist()
        forwards = self.target.forwards
        steps, cut = [], {}
        finished_before = list(self.finished)
        for b in range(self.batch):
            if self.finished[b]:
                continue
            if counts[b] < 1:
                raise InvariantError(f"a step must commit at least one token (row {b} committed none)")
            kept = rows[b][: min(counts[b], self.max_new_tokens - self.generated(b))]
            for i, token in enumerate(kept):
                if token in self.eos_token_ids:
                    kept = kept[: i + 1]
                    self.finished[b] = True
                    break
            self.tokens[b].extend(kept)
            if self.generated(b) == self.max_new_tokens:
                self.finished[b] = True
            if self.finished[b]:
                self.finished_after[b] = forwards
            if len(kept) < counts[b]:
                cut[b] = len(self.tokens[b]) - 1
            proposal = tuple(proposals[b]) if proposals is not None else ()
            ratio = None if ratios is None else float(ratios[b])
            verified = tuple(map(tuple, candidates[b])) if candidates is not None else ()
            steps.append(Step(tuple(kept), drafted[b], min(accepted[b], len(kept)), proposal, ratio, b, verified))
            self.row_steps[b] += 1
        if cut:
            crop_rows(self.runners, cut)
        if self.finished != finished_before:  # rows finished in this step
            read = self.active
            for runner in self.runners:  # their slots' outputs are no longer read (`mtdecode.tokenwise`)
                runner.rows_read = read
        self.steps.extend(steps)
        return steps

    def settle(self) -> None:
        """Crop the finished rows' caches back to their committed tokens: a finished row is a masked slot
        that strategies keep feeding, and whatever it accepted since it finished is thrown away."""
        if any(self.finished):
            crop_rows(self.runners, {b: len(self.tokens[b]) - 1 for b in range(self.batch) if self.finished[b]})


def crop_rows(runners: Sequence[Runner], lengths: dict[int, int]) -> None:
    """Crop the listed rows of every runner's cache to the given lengths, leaving the other rows as they are."""
    for runner in runners:
        cache = runner.cache
        limit = cache.held.clone()
        for b, length in lengths.items():
            limit[b] = min(int(limit[b]), length)
        if bool((limit < cache.held).any()):
            cache.crop(limit)


def check(s: Session) -> None:
    """After every step of `s` (`generate` calls it): raise `InvariantError` unless every cache holds each unfinished
    (or just finished) row's committed tokens but the newest (fewer for a resting draft), none pending, and the
    target ran exactly one forward pass per step of each row."""
    forwards = s.target.forwards
    for runner in s.runners:
        cache = runner.cache
        if cache.pending:
            raise InvariantError(
                f"after step {forwards} the {runner.role} cache has {cache.pending} pending columns; "
                "every guess must be accepted or rejected within its step"
            )
        lengths = cache.lengths.tolist()
        for b in range(s.batch):
            expected = len(s.tokens[b]) - 1
            behind = id(runner) in s.resting and lengths[b] < expected
            if lengths[b] != expected and not behind:
                raise InvariantError(
                    f"after step {forwards} the {runner.role} cache holds {lengths[b]} entries of row {b}; "
                    f"it must hold {expected} (the row's committed tokens but the newest)"
                )
    for b in range(s.batch):
        expected = s.finished_after[b] if s.finished[b] else forwards
        if s.row_steps[b] != expected:
            raise InvariantError(
                f"row {b}: {expected} target forward passes for {s.row_steps[b]} steps: "
                "each step must be exactly one target forward"
            )


def _per_row(value: Int[Tensor, " batch"] | int, batch: int) -> list[int]:
    if isinstance(value, Tensor):
        return value.tolist()
    return [int(value)] * batch


def with_new_token(
    guesses: Int[Tensor, "batch guesses"], accepted: Int[Tensor, " batch"], new_token: Int[Tensor, " batch"]
) -> tuple[Int[Tensor, "batch width"], Int[Tensor, " batch"]]:
    """What a step commits in each row: its accepted guesses followed by one new token of the target's own.

    **Returns:** the tokens, `(batch, guesses + 1)` (row b's new token at column `accepted[b]`,
    the columns after it unused), and the count per row, `accepted + 1`.
    """
    tokens = torch.cat([guesses, guesses.new_zeros(guesses.shape[0], 1)], dim=1)
    tokens = tokens.scatter(1, accepted[:, None], new_token[:, None])
    return tokens, accepted + 1
