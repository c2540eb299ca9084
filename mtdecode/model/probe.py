"""The mask probe: does a model compute what mtdecode's forward passes ask of it?

Every strategy feeds the model explicit positions, a 4-D boolean mask and a cache with holes.
A model that masks or numbers tokens by column on its own (a local window, a bias counted over
columns) or ignores `position_ids` would silently compute something else. `CausalLM` runs this
probe once, before the first token, and refuses such a model with the stage it failed.

**What it compares.** A short text is fed through a `Runner`, as the strategies feed it, in four
stages (left padding; hidden columns with positions that skip them; a tree branch; a compacted
cache), and each logit row is compared with a plain forward of the model over the text alone.
The largest difference of a stage is its *leak*. Two readings judge it:

- the **effect**: how far changing the text's first token moves the later logits, the size of
  what a wrong mask does;
- the **noise**: how far the same text moves through kernel paths that are all right (a plain
  forward over the text, and forwards over the text with 2 and 5 more tokens after it), and
  never less than two rounding steps of the dtype at the largest logit. In float32 this is
  about 1e-4 of a logit; in bfloat16 it is about one logit on ordinary text, and can be ten or
  more on special tokens, whose large activations grow through the layers.

A leak counts when it is above both a tenth of the effect and four times the noise
(`ProbeReading.failed`). The text is made of ordinary tokens (ids at fixed fractions of the
vocabulary, away from the special tokens that vocabularies keep at either end).

**What it can and cannot detect in half precision.** A probe can only see a leak above the
dtype's noise. When four times the noise reaches half the effect (`ProbeReading.resolves` is
false), the model's own dtype cannot tell a wrong mask from rounding, and the probe runs again
on a float32 copy of the model (made for the probe and dropped after it; it needs that much
memory for a moment). The mask and positions a model obeys are properties of its code, not of
its precision, so the float32 verdict holds for the half-precision model. What no probe can see
is a defect that only the half-precision kernels have and that moves logits by less than their
own rounding.
"""

import copy
import math
from dataclasses import dataclass

import torch

from mtdecode.model import CausalLM, Runner, UnsupportedModelError
from mtdecode.tensor_types import Float, Tensor

#: the probe's text, the other row's text and the junk token, as fractions of the vocabulary (ordinary tokens)
TEXT = (0.31, 0.47, 0.23, 0.59, 0.37, 0.71, 0.43)
OTHER = (0.67, 0.29, 0.53, 0.41, 0.61, 0.35)
JUNK = 0.57
#: the most junk columns the probe puts between two of its tokens (more than a window of this size is not probed)
SPREAD = 64
#: a leak counts above this share of the effect ...
EFFECT_SHARE = 0.1
#: ... and above this multiple of the noise
NOISE_FACTOR = 4.0
#: the dtype resolves a leak while NOISE_FACTOR x noise stays below this share of the effect
RESOLVE_SHARE = 0.5


@dataclass(frozen=True)
class ProbeReading:
    """What the probe measured on one model in one dtype.

    - `dtype`: the dtype the forwards ran in;
    - `effect`: the largest logit change that changing the text's first token makes;
    - `noise`: the largest logit difference between two right kernel paths over the same text;
    - `leaks`: each stage's name and its largest logit difference from the plain forward.
    """

    dtype: str
    effect: float
    noise: float
    leaks: tuple[tuple[str, float], ...]

    @property
    def threshold(self) -> float:
        """The largest leak that rounding and the probe's tolerance allow."""
        return max(EFFECT_SHARE * self.effect, NOISE_FACTOR * self.noise)

    @property
    def resolves(self) -> bool:
        """Whether this dtype's noise leaves room to see a leak of half the effect."""
        return NOISE_FACTOR * self.noise < RESOLVE_SHARE * self.effect

    def failed(self) -> tuple[str, float] | None:
        """The first stage whose leak exceeds `threshold`, with its leak, or None."""
        return next(((stage, leak) for stage, leak in self.leaks if not leak <= self.threshold), None)


def probe_custom_mask(adapter: CausalLM) -> ProbeReading:
    """Check that `adapter`'s model obeys custom masks and explicit positions; return the reading it was judged on.

    Reads the model in its own dtype; where that dtype cannot resolve a leak, reads a float32 copy instead (see the
    module docstring).

    **Raises:** `UnsupportedModelError` naming the model, the stage that failed, the leak, the effect and the noise,
    or the error the model's own forward raised on the probe's inputs.
    """
    try:
        reading = read_probe(adapter)
        if not reading.resolves and adapter.dtype not in (torch.float32, torch.float64):
            reading = read_probe(CausalLM(copy.deepcopy(adapter.hf).to(torch.float32), probe=False))
    except UnsupportedModelError:
        raise
    except Exception as error:  # the model's own forward broke on an input mtdecode's forwards give it
        first = (str(error).strip().splitlines() or [""])[0][:200]
        raise UnsupportedModelError(
            f"{type(adapter.hf).__name__} failed on the probe's forwards (a batch with padding, a cache, "
            f"explicit positions and masks): {type(error).__name__}: {first}"
        ) from error
    failure = reading.failed()
    if failure is not None:
        stage, leak = failure
        config = adapter.config
        own = [f"{n}={getattr(config, n)}" for n in _OWN_WINDOWS if isinstance(getattr(config, n, None), int)]
        hint = f" (its config sets {', '.join(own)}, a window it applies itself)" if own else ""
        raise UnsupportedModelError(
            f"{type(adapter.hf).__name__} did not obey a custom 4-D attention mask with explicit position_ids "
            f"({stage}: its logits differ from a plain forward's by {leak:.3g}, where changing an earlier token "
            f"moves them by {reading.effect:.3g} and rounding in {reading.dtype} by {reading.noise:.3g}); it may "
            f"mask, bias or number tokens by column on its own{hint}"
        )
    return reading


def read_probe(adapter: CausalLM) -> ProbeReading:
    """Run the probe's forwards on `adapter` in its own dtype and return the effect, the noise and every leak.

    The stages, each through a `Runner` in a batch of two rows:

    1. **left padding**: the text's first 3 tokens, left padded as the shorter row;
    2. **hidden columns with positions that skip them**: junk tokens hidden by the mask (more of them than the
       model's configured window, up to `SPREAD`), then the next tokens at positions that continue the text;
    3. **a tree branch**: a sibling of the next token beside it in the same forward, each seeing only its own
       ancestors;
    4. **a compacted cache**: only the chain kept (the other row keeps less, leaving a hole), then one more token.

    A model that masks by column or ignores positions fails 2 or 4.
    """
    vocab, device = adapter.vocab_size, adapter.device
    text, other = [int(f * vocab) for f in TEXT], [int(f * vocab) for f in OTHER]
    junk, branch = int(JUNK * vocab), (int(TEXT[3] * vocab) + 1) % vocab
    spread = min(SPREAD, max(4, (_configured_window(adapter.config) or 0) + 1))

    def plain(tokens: list[int]) -> Float[Tensor, "new vocab"]:
        with torch.no_grad():
            return adapter.hf(input_ids=torch.tensor([tokens], device=device)).logits[0].double()

    # the plain forward, and a changed first token (the effect)
    reference = plain(text)  # (7, vocab): after t0 .. t6
    effect = _largest(reference[1:] - plain([(text[0] + 1) % vocab, *text[1:]])[1:])
    # noise: two other widths of the same plain forward, and never less than two rounding steps at the largest logit
    largest = max(_largest(reference), 1e-30)  # the largest finite |logit|
    floor = 2 * torch.finfo(adapter.dtype).eps * 2.0 ** math.floor(math.log2(largest))
    noise = max(floor, *(_largest(reference - plain([*text, *other[:extra]])[: len(text)]) for extra in (2, 5)))
    stages = []
    runner = Runner(adapter, "probe", batch=2)
    # 1. left padding: the text's first 3 tokens as the shorter row
    first = runner.extend([text[:3], other])[0].double()  # (6, vocab); row 0's last 3 are real
    stages.append(("left padding", first[-3:], reference[:3]))
    runner.cache.commit()
    # 2-3. junk hidden by the mask, then a branch and the chain t3 t4 t5 at positions 3, 3, 4, 5
    new = spread + 4
    tokens = torch.tensor([[junk] * spread + [branch, *text[3:6]]] * 2, device=device)
    sees = torch.zeros(new, new, dtype=torch.bool, device=device)  # (new, pending + new): no pending entries
    sees[:spread, :spread] = torch.eye(spread, dtype=torch.bool, device=device)  # junk sees only itself
    sees[spread, spread] = True  # the branch: the committed text and itself
    sees[spread + 1 :, spread + 1 :] = torch.ones(3, 3, dtype=torch.bool, device=device).tril()  # the chain
    offsets = torch.tensor([*range(spread), 0, 0, 1, 2], device=device)
    second = runner.forward(tokens, offsets, sees)[0].double()  # (new, vocab)
    stages.append(("hidden columns with positions that skip them", second[spread + 1 :], reference[3:6]))
    stages.append(("a tree branch", second[spread : spread + 1], plain([*text[:3], branch])[-1:]))
    # 4. keep the chain (the other row only its first two), then one more token
    runner.cache.keep([[spread + 1, spread + 2, spread + 3], [spread + 1, spread + 2, -1]])
    third = runner.extend([[text[6]], [other[0]]])[0].double()  # (1, vocab)
    stages.append(("a compacted cache", third, reference[6:]))
    leaks = tuple((stage, _largest(got - expected)) for stage, got, expected in stages)
    return ProbeReading(str(adapter.dtype).removeprefix("torch."), effect, noise, leaks)


def _largest(difference: Float[Tensor, "*shape"]) -> float:
    """The largest finite |difference| (a head may rule tokens out with -inf on both sides)."""
    finite = difference.isfinite()
    return float(difference[finite].abs().max()) if bool(finite.any()) else 0.0


#: window settings the adapter does not turn into masks (`sliding_window` and `attention_chunk_size` it does)
_OWN_WINDOWS = ("window_size", "attention_window", "local_window", "local_attention", "attention_window_size")


def _configured_window(config) -> int | None:
    """The largest attention window (sliding, local or chunked) the config names, if any."""
    names = ("sliding_window", "window_size", "attention_window", "local_window", "attention_chunk_size")
    windows = [getattr(config, name, None) for name in names]
    windows = [w for w in windows if isinstance(w, int) and not isinstance(w, bool)]
    return max(windows, default=None)
