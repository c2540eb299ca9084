"""Black-box decoders: what `check_greedy` and `check_sampling` test, whoever wrote them.

A **decoder** is any callable

    decoder(model, prompt: list[int], *, max_new_tokens, temperature, top_k, top_p, seed) -> list[int]

that continues `prompt` with a transformers causal LM and returns the new tokens: at most
`max_new_tokens`, ending after the model's end-of-sequence token if it emits one
(`model.generation_config.eos_token_id`, as transformers' `generate` does). `temperature=0`
means greedy; `top_k` and `top_p` may be `None` (off); `seed` must make a sampled run repeat.
transformers' `generate`, a research project's speculative sampler and a student's homework
all fit behind a few lines of glue (this module has the glue for transformers' decoders).

A decoder that takes batches says so with an attribute `takes_batches = True` and a method
`batch(model, prompts, *, max_new_tokens, temperature, top_k, top_p, seeds) -> list[list[int]]`;
the checks then make one call per batch instead of one per prompt. `strategy_decoder` wraps
any mtdecode strategy that way.
"""

import contextlib
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, runtime_checkable

import torch

from mtdecode.generate import generate
from mtdecode.model import CausalLM
from mtdecode.strategy import DecodingStrategy
from mtdecode.testing import coverage


@runtime_checkable
class Decoder(Protocol):
    """Continue `prompt` with `model`; return the new token ids (see the module docstring)."""

    def __call__(
        self,
        model,
        prompt: list[int],
        *,
        max_new_tokens: int,
        temperature: float,
        top_k: int | None,
        top_p: float | None,
        seed: int,
    ) -> list[int]: ...


class DecoderError(Exception):
    """The decoder broke its contract: it raised (`crashed`, with its `traceback`), or returned something other
    than the new tokens asked for."""

    def __init__(self, message: str, *, crashed: bool = False, traceback: str = "") -> None:
        super().__init__(message)
        self.crashed = crashed
        self.traceback = traceback


def run_batch(
    decoder: Callable,
    model,
    prompts: Sequence[Sequence[int]],
    *,
    max_new_tokens: int,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seeds: Sequence[int],
) -> list[list[int]]:
    """Decode every prompt (one batched call if the decoder takes batches) and check what came back.

    Each call is counted in the check's `coverage.active()` record, if one is being kept.

    **Raises:** `DecoderError` if the decoder raises (`crashed`), or returns anything but lists of token ids
    within the vocabulary, at most `max_new_tokens` of them.
    """
    import traceback

    settings = dict(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p)
    record = coverage.active()
    if record is None or getattr(decoder, "records_own_calls", False):  # nothing to count, or it counts itself
        record = coverage.Coverage()
    try:
        if getattr(decoder, "takes_batches", False):
            record.begin_call()
            outputs = decoder.batch(model, [list(p) for p in prompts], seeds=list(seeds), **settings)
            record.end_call(_lists(outputs))
        else:
            outputs = []
            for prompt, seed in zip(prompts, seeds, strict=True):
                record.begin_call()
                outputs.append(decoder(model, list(prompt), seed=seed, **settings))
                record.end_call(_lists(outputs[-1:]))
    except DecoderError:
        raise
    except Exception as error:  # the decoder under test may raise anything: report it with its traceback
        raise DecoderError(
            f"the decoder raised {type(error).__name__}: {error}", crashed=True, traceback=traceback.format_exc()
        ) from error
    vocab = CausalLM.wrap(model).vocab_size
    checked = []
    for output in outputs:
        tokens = output.tolist() if isinstance(output, torch.Tensor) else output
        if not isinstance(tokens, list | tuple) or not all(
            isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in tokens
        ):
            raise DecoderError(f"the decoder returned {output!r}: expected a list of token ids in [0, {vocab})")
        if len(tokens) > max_new_tokens:
            raise DecoderError(f"the decoder returned {len(tokens)} tokens for max_new_tokens={max_new_tokens}")
        checked.append(list(tokens))
    return checked


def _lists(outputs) -> list[list]:
    """Outputs as lists, whatever came back (for counting only; `run_batch` checks them properly)."""
    try:
        return [list(o) for o in outputs]
    except TypeError:
        return []


def strategy_decoder(strategy: DecodingStrategy | Callable[[CausalLM], DecodingStrategy]) -> Callable:
    """An mtdecode strategy as a decoder that takes batches (row b of a batch uses seed `seeds[b]`).

    `strategy` may also be a function of the model that makes one (a speculative strategy needs a
    draft for the model at hand, e.g. `lambda model: Speculative(noisy_assistant(model.hf))`).
    """
    made = strategy if isinstance(strategy, DecodingStrategy) else None

    def pick(model) -> DecodingStrategy:
        return made if made is not None else strategy(CausalLM.wrap(model))

    def decoder(model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed):
        return batch(
            model, [prompt], max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k, top_p=top_p,
            seeds=[seed],
        )[0]

    def batch(model, prompts, *, max_new_tokens, temperature, top_k, top_p, seeds):
        eos = eos_of(model)
        sampling = dict(temperature=temperature, top_k=top_k, top_p=top_p, eos_token_id=eos)
        sampling["pad_token_id"] = CausalLM.wrap(model).hf.generation_config.pad_token_id or 0 if eos else None
        result = generate(model, prompts, pick(model), max_new_tokens=max_new_tokens, seed=seeds, **sampling)
        return [result.row(b) for b in range(len(prompts))]

    decoder.takes_batches = True
    decoder.batch = batch
    kind = type(made).__name__ if made is not None else getattr(strategy, "__name__", "strategy")
    decoder.__name__ = decoder.__qualname__ = f"strategy_decoder({kind})"
    return decoder


def eos_of(model) -> int | list[int] | None:
    """The model's end-of-sequence token(s), from its generation config: where a decoder must stop."""
    return CausalLM.wrap(model).hf.generation_config.eos_token_id


# ---------------------------------------------------------------- transformers' decoders


@contextlib.contextmanager
def global_seed(seed: int, device: torch.device | str = "cpu") -> Iterator[None]:
    """Seed torch's global generator on `device` for the block, inside `torch.random.fork_rng`, so that the
    caller's random state is left as it was. Where a decoder draws from the global generator, it makes the
    seed repeat a run.

    On the CPU only the CPU's generator is seeded: `torch.manual_seed` would also queue the seed for each GPU
    backend that has not started, formatting the caller's whole stack every time (about 3 ms a call under
    pytest, more than a sampled run of a tiny model takes). The CPU's draws are the same either way.
    """
    device = torch.device(device)
    if device.type == "cpu":
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            yield
    else:
        with torch.random.fork_rng(devices=[device], device_type=device.type):
            torch.manual_seed(seed)
            yield


def hf_decoder(assistant: Callable | None = None, **options) -> Callable:
    """transformers' `generate` as a decoder, with extra `generate` options (for example
    `prompt_lookup_num_tokens=3`); `assistant(model)`, if given, makes the `assistant_model`.
    Sampling draws from torch's global generator, seeded with `seed` inside `torch.random.fork_rng`,
    so the caller's random state is left as it was."""

    def decoder(model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed):
        hf = CausalLM.wrap(model).hf
        ids = torch.tensor([list(prompt)], device=hf.device)
        sampling = dict(do_sample=True, temperature=temperature, top_k=top_k or 0, top_p=top_p or 1.0)
        greedy = dict(do_sample=False, temperature=None, top_k=None, top_p=None)
        extra = dict(options, assistant_model=assistant(hf)) if assistant is not None else options
        with global_seed(seed, hf.device):
            out = hf.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new_tokens,
                pad_token_id=hf.generation_config.pad_token_id or 0,
                **(greedy if temperature == 0 else sampling),
                **extra,
            )
        return out[0, ids.shape[1] :].tolist()

    named = ([f"assistant={getattr(assistant, '__name__', 'custom')}"] if assistant else []) + [
        f"{k}={v!r}" for k, v in options.items()
    ]
    decoder.__name__ = decoder.__qualname__ = f"hf_decoder({', '.join(named)})"
    return decoder


_ASSISTANTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def noisy_assistant(hf_model, scale: float = 0.3, seed: int = 1):
    """A draft for `hf_model`: a copy with Gaussian noise of relative size `scale` on every weight (made once for each
    scale and seed)."""
    from mtdecode.testing.models import perturbed

    made = _ASSISTANTS.setdefault(hf_model, {})  # one per noise and seed: another scale is another draft
    if (scale, seed) not in made:
        made[scale, seed] = perturbed(hf_model, scale, seed=seed)
    return made[scale, seed]


def hf_assisted_decoder(num_assistant_tokens: int = 3) -> Callable:
    """transformers' assisted generation (`generate(assistant_model=...)`) with a noisy copy of the model as
    the assistant (`noisy_assistant`), proposing up to `num_assistant_tokens` tokens per step."""
    return hf_decoder(assistant=noisy_assistant, num_assistant_tokens=num_assistant_tokens)


def hf_prompt_lookup_decoder(prompt_lookup_num_tokens: int = 3) -> Callable:
    """transformers' prompt lookup decoding (`generate(prompt_lookup_num_tokens=...)`)."""
    return hf_decoder(prompt_lookup_num_tokens=prompt_lookup_num_tokens)
