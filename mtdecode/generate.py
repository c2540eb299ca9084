"""`mtdecode.generate`: check the inputs, run a strategy over a batch of prompts, collect tokens,
lengths, steps and stats."""

import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import no_type_check

import torch
from transformers import PreTrainedModel

from mtdecode import distributed, sampling
from mtdecode.model import CausalLM
from mtdecode.sampling import RowRandom, Sampler
from mtdecode.session import Choice, Session, Step, check
from mtdecode.strategy import DecodingStrategy
from mtdecode.tensor_types import Int, Tensor


class GreedyFallbackWarning(UserWarning):
    """A tuned strategy decoded a whole `generate` call greedily, one token per target forward, because its
    tuning predicted (or its running counts found) that guessing would not pay on this host. The message is
    one line: which strategy, why, and how to force a setting; `result.stats.choices` holds the same sentence.
    Silence it with `warnings.filterwarnings("ignore", category=mtdecode.GreedyFallbackWarning)`."""


@dataclass(frozen=True)
class Stats:
    """Counts and time of one `generate` call, over all rows of the batch.

    - `new_tokens`: tokens generated, all rows together.
    - `target_forwards`, `draft_forwards`: forward passes of the target and of any draft model
      (one pass decodes every row of the batch).
    - `row_forwards`: target forwards counted once per row they decoded (a finished row no
      longer counts); for a single prompt this equals `target_forwards`.
    - `seconds`: wall time of the decoding loop (prefill included).
    - `drafted_per_position[i]`: row steps that verified a guess at draft position i (0-based).
    - `accepted_per_position[i]`: row steps that accepted their guess at position i.
    - `accepted_lengths`: guesses accepted by each row step, in order (the accepted block lengths).
    - `log_ratios`: for strategies that accept by likelihood (MTAD), each row step's log P/Q of the accepted prefix.
    - `choices`: what a tuned strategy chose on this host and why, one `Choice` per decision (`str(choice)` is a
      one-line sentence), e.g. `Lookahead: W=1, N=2, G=5: predicted 1.31x greedy ...`, or `Lookahead: decodes
      greedily: ...` with `choice.greedy` set; for a drafting rule, how many guesses its row steps verified and
      how many drafted nothing because no guess paid. Empty for a strategy with nothing tuned.
    """

    new_tokens: int
    target_forwards: int
    draft_forwards: int
    seconds: float
    row_forwards: int = 0
    drafted_per_position: tuple[int, ...] = ()
    accepted_per_position: tuple[int, ...] = ()
    accepted_lengths: tuple[int, ...] = ()
    log_ratios: tuple[float, ...] = ()
    choices: tuple[Choice, ...] = ()

    @classmethod
    def from_steps(
        cls,
        steps: list[Step],
        *,
        target_forwards: int,
        draft_forwards: int,
        seconds: float,
        choices: Sequence[Choice] = (),
    ) -> "Stats":
        longest = max((step.drafted for step in steps), default=0)
        return cls(
            new_tokens=sum(len(step.tokens) for step in steps),
            target_forwards=target_forwards,
            draft_forwards=draft_forwards,
            seconds=seconds,
            row_forwards=len(steps),  # one step per row per target forward
            drafted_per_position=tuple(sum(step.drafted > i for step in steps) for i in range(longest)),
            accepted_per_position=tuple(sum(step.accepted > i for step in steps) for i in range(longest)),
            accepted_lengths=tuple(step.accepted for step in steps),
            log_ratios=tuple(step.log_ratio for step in steps if step.log_ratio is not None),
            choices=tuple(choices),
        )

    @property
    def mean_accepted(self) -> float:
        """Accepted guesses per target forward pass of a row (the target's own token not counted)."""
        return sum(self.accepted_per_position) / self.row_forwards if self.row_forwards else 0.0

    @property
    def tokens_per_forward(self) -> float:
        """New tokens per target forward pass of a row: how many tokens each expensive pass bought."""
        return self.new_tokens / self.row_forwards if self.row_forwards else 0.0

    @property
    def tokens_per_second(self) -> float:
        """New tokens of all rows per second."""
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class GenerationResult:
    """What `generate` returns.

    - `tokens`: the new tokens of each row, `(batch, new)`, right-padded with `pad_token_id`.
    - `lengths`: how many new tokens each row has, `(batch,)`.
    - `steps`: one `Step` per row per target forward pass: which tokens it committed (`step.row` says where).
    - `stats`: forward counts, tokens per forward and time, over all rows, and what a tuned strategy chose.
    """

    tokens: Int[Tensor, "batch new"]
    lengths: Int[Tensor, " batch"]
    steps: list[Step]
    stats: Stats

    def row(self, b: int) -> list[int]:
        """Row b's new tokens, without padding."""
        return self.tokens[b, : int(self.lengths[b])].tolist()

    def steps_of(self, b: int) -> list[Step]:
        """Row b's steps, in order."""
        return [step for step in self.steps if step.row == b]


def generate(
    model: CausalLM | PreTrainedModel,
    prompts: Tensor | Sequence[int] | Sequence[Sequence[int]],
    strategy: DecodingStrategy,
    *,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    pad_token_id: int | None = None,
    seed: int | Sequence[int] | None = None,
    progress: bool = False,
    on_step: Callable[[Step], None] | None = None,
) -> GenerationResult:
    """Continue each prompt with `model`, choosing tokens by `strategy`, all prompts side by side.

    **Arguments:**

    - `model`: a transformers causal LM or the `CausalLM` that `mtdecode.load_model` returns.
    - `prompts`: one prompt (a list of ints or a 1-D tensor), or a batch: a list of token-id lists
      of any lengths, or an `Int[Tensor, "batch prompt"]` when all have the same length.
      Checked here with clear errors rather than by the type annotations.
    - `strategy`: a `DecodingStrategy`, e.g. `mtdecode.strategies.Autoregressive()`.
    - `max_new_tokens`: each row generates at most this many tokens (0 returns none).
    - `temperature`, `top_k`, `top_p`: the `Sampler`; `temperature=0` is greedy.
    - `eos_token_id`: a row stops after committing this token (or any of these tokens).
    - `pad_token_id`: fills `result.tokens` after a row's end; needed when rows of a batch can
      end at different lengths (a batch with `eos_token_id`).
    - `seed`: makes sampled runs repeat exactly, in this process and in any other on the same
      host with the same torch, dtype, device and thread count (the drafting rules weigh
      forward costs measured once and kept on disk, `mtdecode.store`; see
      `docs/concepts/rounding.md` for other hosts). Row b of a batch seeded `s` uses seed
      `s + b`, so it decodes exactly as its prompt alone with `seed=s + b`; a list gives each
      row its seed. `None` takes a fresh seed each call (greedy tokens never depend on it, but
      Jacobi's and lookahead's steps do).
    - `progress`: show a progress bar over the new tokens of all rows.
    - `on_step`: called with each row's `Step` as soon as its tokens are committed (for
      streaming output; `mtdecode generate` colours the text by step with it).

    **Returns:**

    A `GenerationResult` with `tokens`, `lengths`, `steps` and `stats` (`stats.choices`: what a tuned
    strategy chose on this host, and why).

    **Warns:**

    `GreedyFallbackWarning`, once per call, when a tuned strategy decoded the whole call greedily because
    guessing was not predicted (or not found) to pay here; the one-line message says how to force a setting.

    **Raises:**

    `ValueError` for an empty or malformed prompt (naming the row), a bad setting, or a
    prompt plus budget longer than the model's context; `UnsupportedModelError` for a model
    that cannot take custom masks.
    """
    target = CausalLM.wrap(model)
    rows = _check_prompts(prompts, target)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    for b, prompt in enumerate(rows):
        if len(prompt) + max_new_tokens > target.max_length:
            raise ValueError(
                f"prompt {b} ({len(prompt)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's "
                f"context of {target.max_length} positions"
            )
    eos = _token_ids(eos_token_id, target.vocab_size, "eos_token_id")
    if pad_token_id is not None:
        _token_ids(pad_token_id, target.vocab_size, "pad_token_id")
    elif len(rows) > 1 and eos:
        raise ValueError("rows of a batch can end at different lengths at EOS: pass pad_token_id= to fill after them")
    seeds, sampler = _seeds(seed, len(rows)), Sampler(temperature, top_k, top_p)
    if target.sharded:  # every rank must make the same forwards (`mtdecode.distributed`)
        distributed.check_alike("generate's call", (rows, type(strategy).__name__, sampler, max_new_tokens, eos, seeds))
    session = Session(
        target, rows, sampler=sampler, random=RowRandom(seeds, device=target.device), max_new_tokens=max_new_tokens,
        eos_token_ids=eos,
    )  # fmt: skip

    bar = _progress_bar(max_new_tokens * len(rows)) if progress else None
    start = time.perf_counter()
    if not session.done:
        steps = strategy.decode(session)
        for batch_steps in steps:
            session.settle()
            check(session)
            if target.sharded:  # a rank that went its own way stops here, before a forward waits for ever
                made = [(step.row, step.drafted, step.tokens) for step in batch_steps]
                distributed.check_alike(f"step {len(session.steps)}'s tokens", made)
            for step in batch_steps:
                if bar is not None:
                    bar.update(len(step.tokens))
                if on_step is not None:
                    on_step(step)
            if session.done:
                steps.close()
                break
    seconds = time.perf_counter() - start
    if bar is not None:
        bar.close()

    stats = Stats.from_steps(
        session.steps,
        target_forwards=session.target.forwards,
        draft_forwards=sum(r.forwards for r in session.runners[1:]),
        seconds=seconds,
        choices=session.chosen(),
    )
    warn_of_fallback(stats.choices)
    lengths = [session.generated(b) for b in range(session.batch)]
    tokens = torch.full((session.batch, max(lengths, default=0)), pad_token_id or 0, dtype=torch.long, device="cpu")
    for b, n in enumerate(lengths):
        tokens[b, :n] = torch.tensor(session.new_tokens(b), dtype=torch.long, device="cpu")
    device = target.device
    return GenerationResult(tokens.to(device), torch.tensor(lengths, device=device), session.steps, stats)


def warn_of_fallback(choices: Sequence[Choice]) -> None:
    """One `GreedyFallbackWarning` per choice that made the whole run greedy, pointing at the code that called
    `generate` (the first frame outside mtdecode and the type checkers' wrappers)."""
    frame, level = sys._getframe(), 1  # this frame is `warnings.warn`'s stack level 1
    while frame.f_back is not None and frame.f_globals.get("__name__", "").partition(".")[0] in _INSIDE:
        frame, level = frame.f_back, level + 1
    for choice in choices:
        if choice.greedy:
            warnings.warn(str(choice), GreedyFallbackWarning, stacklevel=level)


#: packages whose frames the warning passes over, to point at the code that called into mtdecode
_INSIDE = ("mtdecode", "jaxtyping", "beartype")


def _check_prompts(prompts, target: CausalLM) -> list[list[int]]:
    """The prompts as lists of ints, or a ValueError that says what is wrong and in which row."""
    if isinstance(prompts, Tensor):
        if prompts.dtype.is_floating_point or prompts.dtype.is_complex or prompts.dtype == torch.bool:
            raise ValueError(f"prompts must hold integer token ids, got dtype {prompts.dtype}")
        if prompts.ndim == 1:
            prompts = prompts[None]
        if prompts.ndim != 2:
            raise ValueError(f"a prompt tensor must have shape (batch, prompt), got {tuple(prompts.shape)}")
        rows = prompts.tolist()
    else:
        prompts = list(prompts)
        single = not any(isinstance(p, Tensor) or (isinstance(p, Sequence) and not isinstance(p, str)) for p in prompts)
        rows = [prompts] if single else [_as_list(p, b) for b, p in enumerate(prompts)]
        for b, row in enumerate(rows):
            if not all(isinstance(t, int) and not isinstance(t, bool) for t in row):
                raise ValueError(f"prompt {b} must be a list of ints (token ids)")
    if not rows:
        raise ValueError("the batch is empty: pass at least one prompt")
    vocab = target.vocab_size
    for b, row in enumerate(rows):
        if not row:
            label = "the prompt is empty" if len(rows) == 1 else f"prompt {b} is empty"
            raise ValueError(f"{label}: decoding needs at least one token to start from")
        bad = [t for t in row if not 0 <= t < vocab]
        if bad:
            raise ValueError(f"prompt {b}: token ids {bad[:5]} are outside the vocabulary [0, {vocab})")
    return rows


@no_type_check  # untyped input, once per prompt of every generate call
def _as_list(prompt, row: int) -> list:
    if isinstance(prompt, Tensor):
        if prompt.ndim != 1 or prompt.dtype.is_floating_point or prompt.dtype == torch.bool:
            raise ValueError(f"prompt {row} must be a 1-D tensor of integer token ids")
        return prompt.tolist()
    if isinstance(prompt, int | str | bytes) or not isinstance(prompt, Sequence):
        raise ValueError(f"prompt {row} must be a list of ints (token ids), got {type(prompt).__name__}")
    return list(prompt)


def _token_ids(value: int | Sequence[int] | None, vocab_size: int, name: str) -> frozenset[int]:
    if value is None:
        return frozenset()
    ids = [value] if isinstance(value, int) else list(value)
    for token in ids:
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocab_size:
            raise ValueError(f"{name} {token!r} is not a token id in [0, {vocab_size})")
    return frozenset(ids)


def _seeds(seed: int | Sequence[int] | None, batch: int) -> list[int]:
    """One seed per row: `seed + b`, the seeds given, or fresh ones."""
    if seed is None:
        seed = distributed.agreed(sampling.fresh_seed())  # on several ranks, rank 0's
    if isinstance(seed, int) and not isinstance(seed, bool):
        seeds = [seed + b for b in range(batch)]
    else:
        seeds = list(seed)
        if len(seeds) != batch:
            raise ValueError(f"{len(seeds)} seeds for a batch of {batch} prompts")
    for s in seeds:
        if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < 2**62:
            raise ValueError(f"seed {s!r} must be an integer in [0, 2^62)")
    return seeds


def _progress_bar(total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="tok", desc="generate")
