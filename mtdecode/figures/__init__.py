"""Teaching figures drawn from real runs: lookahead's window, EAGLE's token tree, a draft/verify timeline.

A function named by what it draws takes plain data (token texts, parents, step records) and
returns a matplotlib `Figure`:

- `lookahead_window`: the 2-D window of one lookahead step, each cell at its position, the
  n-grams the step gives the pool as diagonal arrows, and under it the verification branch;
- `token_tree`: the tree one EAGLE step verifies, root at the left, the accepted path highlighted;
- `timeline`: the forward passes of a few steps, one lane per model, in units of forward cost.

A `record_...` function gets that data from a real run of a strategy, without changing what it
does: `record_steps` calls a lookahead or EAGLE strategy's own step function (`lookahead_step`,
`verify_tree`) through a thin wrapper that copies its inputs and outputs for the length of one
`generate` call (as `tests/test_tutorials.py` records a trajectory); `record_forwards` counts
every forward of the models with PyTorch forward pre-hooks and closes a step at each `on_step`
call. Wrapping a module's function is not thread-safe: record one run at a time.

```python
import mtdecode, mtdecode.figures
from mtdecode.strategies import Lookahead

model, tokenizer = mtdecode.load_model(), mtdecode.load_tokenizer()
prompt = tokenizer("The planets of the solar system, in order:")["input_ids"]
steps = mtdecode.figures.record_steps(model, prompt, Lookahead(4, 4, 3), max_new_tokens=24,
                                      text=mtdecode.figures.token_text(tokenizer))
step = max(steps, key=lambda s: s.accepted)
mtdecode.figures.lookahead_window(step.window, step.predictions, step.candidates, step.chosen, step.accepted)
```

The elements of each figure carry a matplotlib `gid` ("window", "ngram", "accepted", ...) so that
tests can count what was drawn.
"""

from mtdecode.figures.draw import shown, token_text
from mtdecode.figures.record import record_steps
from mtdecode.figures.timeline import Forward, TimedStep, measured_costs, record_forwards, timeline
from mtdecode.figures.tree import TreeStep, token_tree
from mtdecode.figures.window import LookaheadStep, lookahead_window

__all__ = [
    "Forward",
    "LookaheadStep",
    "TimedStep",
    "TreeStep",
    "lookahead_window",
    "measured_costs",
    "record_forwards",
    "record_steps",
    "shown",
    "timeline",
    "token_text",
    "token_tree",
]
