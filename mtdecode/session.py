"""What one `generate` call shares with its strategy: the committed tokens, the models'
runners and caches, the Sampler and the random generator.

The invariant every strategy keeps, checked after every step: **each cache holds the
committed tokens except the newest one, and nothing pending.** The newest committed
token has not been fed to any model yet; it is the input of the next forward pass.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from mtdecode.model import CausalLM, Runner
from mtdecode.sampling import Sampler


@dataclass(frozen=True)
class Step:
    """What one target forward pass committed.

    - `tokens`: the tokens it added to the output, in order (at least one).
    - `drafted`: how many guessed tokens that forward verified (0 for plain decoding).
    - `accepted`: how many of those guesses it kept; the last token of `tokens` is the
      target's own (a correction or a bonus token), unless EOS or the budget cut the step.
    - `proposal`: the guessed block the target verified, if the strategy records it (MTAD does).
    - `log_ratio`: for strategies that accept by likelihood (MTAD), log P/Q of the accepted prefix.
    """

    tokens: tuple[int, ...]
    drafted: int = 0
    accepted: int = 0
    proposal: tuple[int, ...] = ()
    log_ratio: float | None = None


class InvariantError(RuntimeError):
    """A strategy left a cache out of step with the committed tokens (a bug in the strategy)."""


class Session:
    """The state of one `generate` call, handed to `DecodingStrategy.decode`.

    **Attributes:**

    - `target`: the target model's `Runner` (its adapter and its KV cache).
    - `sampler`: the shared `Sampler`; `sampler.probs(logits)` is the target distribution p.
    - `generator`: the random generator every draw must use, so a seed reproduces a run.
    - `tokens`: prompt followed by the committed new tokens.
    - `done`: set once the budget is spent or an EOS token was committed.
    """

    def __init__(
        self,
        target: CausalLM,
        prompt: list[int],
        *,
        sampler: Sampler,
        generator: torch.Generator,
        max_new_tokens: int,
        eos_token_ids: frozenset[int] = frozenset(),
    ) -> None:
        self.sampler = sampler
        self.generator = generator
        self.tokens = list(prompt)
        self.prompt_length = len(prompt)
        self.max_new_tokens = max_new_tokens
        self.eos_token_ids = eos_token_ids
        self.steps: list[Step] = []
        self.done = max_new_tokens == 0
        self.device = target.device
        self.runners: list[Runner] = []
        self.target = self.runner(target, role="target")

    def runner(self, model: CausalLM, role: str) -> Runner:
        """A fresh runner (model + empty cache) whose cache is checked with the target's."""
        if model.device != self.device:
            raise ValueError(
                f"the {role} model is on {model.device} but the target is on {self.device}; put both on one device"
            )
        runner = Runner(model, role)
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

    def catch_up(self, runner: Runner) -> None:
        """Feed `runner` the committed tokens it has not read, except the newest (after a step that
        accepted every guess, the draft has not read the last one yet)."""
        missing = self.tokens[runner.cache.length : len(self.tokens) - 1]
        if missing:
            runner.extend(missing)
            runner.cache.commit()

    def unread(self, runner: Runner) -> list[int]:
        """Committed tokens `runner`'s model has not read yet: the whole prompt at first, then the newest token."""
        return self.tokens[runner.cache.length :]

    @property
    def new_tokens(self) -> list[int]:
        return self.tokens[self.prompt_length :]

    @property
    def remaining(self) -> int:
        """How many more tokens the budget allows."""
        return self.max_new_tokens - len(self.new_tokens)

    def commit(
        self,
        tokens: Sequence[int],
        *,
        drafted: int = 0,
        accepted: int = 0,
        proposal: tuple[int, ...] = (),
        log_ratio: float | None = None,
    ) -> Step:
        """Append `tokens` to the output and record the step.

        The tokens are cut after the first EOS token and at the budget. If anything was
        cut, caches holding entries for the cut tokens are cropped back, so the
        invariant holds on the last step too.
        """
        if self.done:
            raise InvariantError("commit() after generation finished")
        if len(tokens) == 0:
            raise InvariantError("a step must commit at least one token")
        kept = list(tokens[: self.remaining])
        for i, token in enumerate(kept):
            if token in self.eos_token_ids:
                kept = kept[: i + 1]
                self.done = True
                break
        self.tokens.extend(kept)
        self.done = self.done or self.remaining == 0
        if len(kept) < len(tokens):
            for runner in self.runners:
                if runner.cache.length > len(self.tokens) - 1:
                    runner.cache.crop(len(self.tokens) - 1)
        step = Step(tuple(kept), drafted, min(accepted, len(kept)), proposal, log_ratio)
        self.steps.append(step)
        return step

    def check(self) -> None:
        """Raise `InvariantError` unless every cache holds all committed tokens but the newest, none pending,
        and the target ran exactly one forward pass per step."""
        expected = len(self.tokens) - 1
        for runner in self.runners:
            cache = runner.cache
            if cache.pending or cache.length != expected:
                raise InvariantError(
                    f"after step {len(self.steps)} the {runner.role} cache holds {cache.length} entries "
                    f"({cache.pending} pending); it must hold {expected} (the committed tokens but the newest)"
                )
        if self.target.forwards != len(self.steps):
            raise InvariantError(
                f"{self.target.forwards} target forward passes for {len(self.steps)} steps: "
                "each step must be exactly one target forward"
            )
