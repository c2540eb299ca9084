"""The steps of a real run, for the figures: `record_steps` runs a strategy once and copies what its step saw."""

from collections.abc import Callable, Sequence
from unittest import mock

from transformers import PreTrainedModel

from mtdecode.figures.tree import TreeStep, watch_trees
from mtdecode.figures.window import LookaheadStep, watch_window
from mtdecode.generate import generate
from mtdecode.model import CausalLM
from mtdecode.strategies import eagle, lookahead
from mtdecode.strategies.eagle import Eagle
from mtdecode.strategies.lookahead import Lookahead


def record_steps(
    model: CausalLM | PreTrainedModel,
    prompt: Sequence[int],
    strategy: Lookahead | Eagle,
    *,
    max_new_tokens: int,
    text: Callable[[int], str] = str,
    **options,
) -> list[LookaheadStep] | list[TreeStep]:
    """Run `strategy` on one prompt and record what each of its steps verified, as its figure draws it.

    **Arguments:**

    - `model`, `prompt`, `max_new_tokens`, `options`: as for `mtdecode.generate` (one prompt).
    - `strategy`: a `Lookahead` (each step's window, predictions and verification branch, for
      `lookahead_window`) or an `Eagle` (each step's tree and accepted path, for `token_tree`). A `Lookahead()`
      that decodes greedily on this host records nothing; give W, N and G to be sure of a window.
    - `text`: a token's text in the records (`token_text(tokenizer)`; the default, `str`, shows the id).

    **Returns:**

    One `LookaheadStep` per lookahead step, or one `TreeStep` per tree step (an EAGLE run's first step, a plain
    forward over the prompt, has no tree), in order.
    """
    if isinstance(strategy, Lookahead):
        module, name, watch = lookahead, "lookahead_step", watch_window
    else:
        module, name, watch = eagle, "verify_tree", watch_trees
    records: list = []
    with mock.patch.object(module, name, watch(getattr(module, name), records, text)):
        generate(model, [list(prompt)], strategy, max_new_tokens=max_new_tokens, **options)
    return records
