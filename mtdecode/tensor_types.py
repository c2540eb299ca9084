"""Tensor type aliases and the axis names used across mtdecode.

Every tensor in a public signature is written with
[jaxtyping](https://docs.kidger.site/jaxtyping/) annotations. The axis names are the
same everywhere, so a reader can follow a tensor from one function to the next:

| axis | meaning |
| --- | --- |
| `batch` | independent sequences decoded side by side |
| `prompt` | tokens of the prompt |
| `new` | tokens fed to the model in this forward pass |
| `query` | rows of an attention mask: the tokens being fed (same length as `new`) |
| `key` | columns of an attention mask: cached tokens followed by the new ones |
| `prefix` | committed tokens already in the KV cache |
| `vocab` | the vocabulary |
| `kept` | entries a cache compaction keeps |
| `candidate`, `length` | lookahead's verification branch: G candidate n-grams of N - 1 tokens |
| `beam` | MTAD's beams (W of them) |
| `frontier`, `node` | EAGLE's tree: the newest depth's W nodes, all nodes |
| `heads`, `dim` | a KV cache layer's attention heads and their width |

Where a tensor's axes are split, merged, reordered or broadcast, the code says so with
[einops](https://einops.rocks/) and these names, e.g. `rearrange(logits, "batch (candidate length)
vocab -> batch candidate length vocab", candidate=G)`: the pattern is the shape contract a
comment would otherwise state, and einops checks it.

Type checking is off at import (it costs time on every call). It is on in the test
suite through jaxtyping's pytest plugin, and can be switched on for any program by
setting the environment variable `MTDECODE_TYPECHECK=1` before `import mtdecode`.
A few functions that take and return only plain ints, floats, bools or lists, and that run for
every row, step or draw, are marked `typing.no_type_check`: a check costs tens of microseconds,
more than such a function (`Session.batch`, `Session.done`, `Session.generated`,
`Session.new_tokens`, `KVCache.columns`, `KVCache.pending`, `CausalLM.vocab_size`,
`CausalLM.max_length`, `DraftCosts.t`, `DraftCosts.catch_up`, the `Step` record, and the small
helpers beside them; those marked last made nearly half of the checked calls in a profile of the
batch, speculative and EAGLE tests; lookahead's `NgramPool` and prompt lookup's `lookup` made 300,000
of 1.1 million in a profile of four sampling and half-precision tests). So are the per-forward helpers of
plain values (`cache.kv.cache_keyword`, the oracle's forward counters) and the layers that run inside a model's
forward once per layer: `SkinnyLinear.forward` and the products behind it (`mtdecode.zoo.skinny`) and
`mtdecode.attention.grouped_sdpa`. SmolLM2's forward calls 211 linear layers and 30 attention layers; checking
the layers added about 70 microseconds to each linear layer (a 576 x 576 product over one row takes 55), about
15 ms to every forward of SmolLM2. Their results are compared with torch's own product and transformers' sdpa, shapes
included, in tests/test_zoo.py and tests/test_adapter.py, and what the model returns is checked where mtdecode
reads it (`CausalLM.forward`).
Other functions that take or return tensors stay checked. The tests switch the checks off only where other
tests check the same types (`types_unchecked` in tests/conftest.py: the family matrix, a greedy reference, the
half-precision runs of the strategies, the oracle's mutants).
"""

from jaxtyping import Bool, Float, Int
from torch import Tensor

# Token ids and positions.
TokenIds = Int[Tensor, "batch new"]
PromptIds = Int[Tensor, "batch prompt"]
Positions = Int[Tensor, "batch new"]

# Attention masks: True means "this query may attend to this key".
Mask = Bool[Tensor, "query key"]
Mask4D = Bool[Tensor, "batch 1 query key"]

# Model outputs and distributions.
Logits = Float[Tensor, "batch new vocab"]
NextLogits = Float[Tensor, "*batch vocab"]
Probs = Float[Tensor, "*batch vocab"]

__all__ = [
    "Bool",
    "Float",
    "Int",
    "Logits",
    "Mask",
    "Mask4D",
    "NextLogits",
    "Positions",
    "Probs",
    "PromptIds",
    "Tensor",
    "TokenIds",
]
