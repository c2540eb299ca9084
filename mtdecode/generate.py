"""`mtdecode.generate`: check the inputs, run a strategy, collect tokens, steps and stats."""

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from mtdecode import sampling
from mtdecode.model import CausalLM
from mtdecode.sampling import Sampler
from mtdecode.session import Session, Step
from mtdecode.strategy import DecodingStrategy
from mtdecode.tensor_types import Int, Tensor


@dataclass(frozen=True)
class Stats:
    """Counts and time of one `generate` call.

    - `new_tokens`: tokens generated.
    - `target_forwards`, `draft_forwards`: forward passes of the target and of any draft model.
    - `seconds`: wall time of the decoding loop (prefill included).
    - `drafted_per_position[i]`: steps that verified a guess at draft position i (0-based).
    - `accepted_per_position[i]`: steps that accepted their guess at position i.
    - `accepted_lengths`: guesses accepted by each step, in order (the accepted block lengths).
    - `log_ratios`: for strategies that accept by likelihood (MTAD), each step's log P/Q of the accepted prefix.
    """

    new_tokens: int
    target_forwards: int
    draft_forwards: int
    seconds: float
    drafted_per_position: tuple[int, ...] = ()
    accepted_per_position: tuple[int, ...] = ()
    accepted_lengths: tuple[int, ...] = ()
    log_ratios: tuple[float, ...] = ()

    @classmethod
    def from_steps(cls, steps: list[Step], *, target_forwards: int, draft_forwards: int, seconds: float) -> "Stats":
        longest = max((step.drafted for step in steps), default=0)
        return cls(
            new_tokens=sum(len(step.tokens) for step in steps),
            target_forwards=target_forwards,
            draft_forwards=draft_forwards,
            seconds=seconds,
            drafted_per_position=tuple(sum(step.drafted > i for step in steps) for i in range(longest)),
            accepted_per_position=tuple(sum(step.accepted > i for step in steps) for i in range(longest)),
            accepted_lengths=tuple(step.accepted for step in steps),
            log_ratios=tuple(step.log_ratio for step in steps if step.log_ratio is not None),
        )

    @property
    def mean_accepted(self) -> float:
        """Accepted guesses per target forward pass (the target's own token not counted)."""
        return sum(self.accepted_per_position) / self.target_forwards if self.target_forwards else 0.0

    @property
    def tokens_per_forward(self) -> float:
        """New tokens per target forward pass: how many tokens each expensive pass bought."""
        return self.new_tokens / self.target_forwards if self.target_forwards else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


@dataclass(frozen=True)
class GenerationResult:
    """What `generate` returns.

    - `tokens`: the new tokens only, shape `(batch, new)`.
    - `steps`: one `Step` per target forward pass: which tokens it committed.
    - `stats`: forward counts, tokens per forward and time.
    """

    tokens: Int[Tensor, "batch new"]
    steps: list[Step]
    stats: Stats


def generate(
    model: CausalLM | PreTrainedModel,
    prompt_ids: Tensor | Sequence[int],
    strategy: DecodingStrategy,
    *,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | Sequence[int] | None = None,
    seed: int | None = None,
    progress: bool = False,
    on_step: Callable[[Step], None] | None = None,
) -> GenerationResult:
    """Continue `prompt_ids` with `model`, choosing tokens by `strategy`.

    **Arguments:**

    - `model`: a transformers causal LM or the `CausalLM` that `mtdecode.load_model` returns.
    - `prompt_ids`: token ids, an `Int[Tensor, "batch prompt"]` (or one 1-D prompt) or a list of ints.
      Checked here with clear errors rather than by the type annotations.
    - `strategy`: a `DecodingStrategy`, e.g. `mtdecode.strategies.Autoregressive()`.
    - `max_new_tokens`: at most this many tokens are generated (0 returns none).
    - `temperature`, `top_k`, `top_p`: the `Sampler`; `temperature=0` is greedy.
    - `eos_token_id`: stop after committing this token (or any of these tokens).
    - `seed`: seeds the random generator, so sampled runs repeat exactly; `None` takes a fresh
      seed each call (greedy tokens never depend on it, but Jacobi's and lookahead's steps do).
    - `progress`: show a progress bar over the new tokens.
    - `on_step`: called with each `Step` as soon as its tokens are committed (for streaming
      output; `mtdecode generate` colours the text by step with it).

    **Returns:**

    A `GenerationResult` with `tokens`, `steps` and `stats`.

    **Raises:**

    `ValueError` for an empty or malformed prompt, a bad setting, a batch larger than
    the strategy supports, or a prompt plus budget longer than the model's context;
    `UnsupportedModelError` for a model that cannot take custom masks.
    """
    target = CausalLM.wrap(model)
    prompt = _check_prompt(prompt_ids, target, strategy)
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if len(prompt) + max_new_tokens > target.max_length:
        raise ValueError(
            f"prompt ({len(prompt)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's "
            f"context of {target.max_length} positions"
        )
    sampler = Sampler(temperature, top_k, top_p)
    generator = torch.Generator(device=target.device)
    generator.manual_seed(sampling.fresh_seed() if seed is None else seed)
    session = Session(
        target,
        prompt,
        sampler=sampler,
        generator=generator,
        max_new_tokens=max_new_tokens,
        eos_token_ids=_eos_set(eos_token_id, target.vocab_size),
    )

    bar = _progress_bar(max_new_tokens) if progress else None
    start = time.perf_counter()
    if not session.done:
        steps = strategy.decode(session)
        for step in steps:
            session.check()
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

    new = session.new_tokens
    stats = Stats.from_steps(
        session.steps,
        target_forwards=session.target.forwards,
        draft_forwards=sum(r.forwards for r in session.runners[1:]),
        seconds=seconds,
    )
    tokens = torch.tensor([new], dtype=torch.long, device=target.device).reshape(1, len(new))
    return GenerationResult(tokens=tokens, steps=session.steps, stats=stats)


def _check_prompt(prompt_ids, target: CausalLM, strategy: DecodingStrategy) -> list[int]:
    """Return the prompt as a list of ints, or raise a ValueError that says what is wrong."""
    if isinstance(prompt_ids, Tensor):
        if prompt_ids.dtype.is_floating_point or prompt_ids.dtype.is_complex or prompt_ids.dtype == torch.bool:
            raise ValueError(f"prompt_ids must hold integer token ids, got dtype {prompt_ids.dtype}")
        if prompt_ids.ndim == 1:
            prompt_ids = prompt_ids[None]
        if prompt_ids.ndim != 2:
            raise ValueError(f"prompt_ids must have shape (batch, prompt), got {tuple(prompt_ids.shape)}")
        batch = prompt_ids.shape[0]
        if batch > strategy.max_batch_size:
            raise ValueError(
                f"{type(strategy).__name__} decodes at most {strategy.max_batch_size} sequence(s) at once; "
                f"got a batch of {batch}"
            )
        if batch == 0:
            raise ValueError("prompt_ids has an empty batch")
        prompt = prompt_ids[0].tolist()
    else:
        prompt = list(prompt_ids)
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise ValueError("prompt_ids must be a list of ints or an integer tensor")
    if not prompt:
        raise ValueError("the prompt is empty: decoding needs at least one token to start from")
    bad = [t for t in prompt if not 0 <= t < target.vocab_size]
    if bad:
        raise ValueError(f"prompt token ids {bad[:5]} are outside the vocabulary [0, {target.vocab_size})")
    return prompt


def _eos_set(eos_token_id: int | Sequence[int] | None, vocab_size: int) -> frozenset[int]:
    if eos_token_id is None:
        return frozenset()
    ids = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id)
    for token in ids:
        if isinstance(token, bool) or not isinstance(token, int) or not 0 <= token < vocab_size:
            raise ValueError(f"eos_token_id {token!r} is not a token id in [0, {vocab_size})")
    return frozenset(ids)


def _progress_bar(total: int):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="tok", desc="generate")
