"""Token-wise layers that skip the tokens whose outputs nobody reads.

A batch's forward is a rectangle of rows times new tokens, and some of its cells are never read: the left padding of
a row shorter than the widest (the prompts' forward), and every token of a row that has finished, which keeps its slot
in the batch (`mtdecode.session`) while the others decode on. The rows of a batch finish at different steps whenever
a strategy guesses, so the last steps of a run feed the finished rows' slots beside the rows still decoding.

Each layer's MLP and the output layer act on every token alone, and on a small CPU their products over more than a
few tokens are bound by arithmetic, so they cost in proportion to the tokens fed. Here they skip the unread cells:
the tokens that matter are gathered into one block, the layer runs on that block, and the unread cells get zeros.
Attention still runs over the whole rectangle (each row reads its own cache), and a skipped cell's zeros only ever
reach that cell and the cache entries made from it, which no read cell sees (the mask hides padding, and a finished
row's cache is cut back to its committed tokens after every step, `Session.settle`).

`CausalLM` names the cells to compute around each forward (`computing_only`); a model whose layers were switched with
`tokenwise_skips` obeys it, any other model ignores it. A layer computes the same products on its block as on the
rectangle, so a read cell's values change at most in rounding, as with any change of batch shape
(`mtdecode.zoo.skinny`).
"""

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import no_type_check

from torch import nn

from mtdecode.tensor_types import Bool, Float, Int, Tensor

#: a block skips its unread cells only when at least this many are unread and at least this many are read: fewer
#: cells in all run at the weights' reading speed whatever their number, and a block of 1 to 3 cells takes slower
#: kernels (`benchmarks/tokenwise_skip.py`)
FEWEST_SKIPPED = 4
FEWEST_READ = 4


@dataclass(frozen=True)
class Computed:
    """The cells one forward reads, as flat indices into its rectangles: `tokens` among its `cells` (rows x new
    tokens, what each layer's MLP is fed), `logits` among its `logit_cells` (rows x the logits it keeps); None where
    every cell is computed."""

    tokens: Int[Tensor, " read"] | None
    cells: int
    logits: Int[Tensor, " read_logits"] | None
    logit_cells: int


def skipping(read: Bool[Tensor, "*cells"]) -> Int[Tensor, " read"] | None:
    """The flat indices of the `read` cells if skipping the others pays (`FEWEST_SKIPPED`, `FEWEST_READ`), else
    None."""
    count = int(read.sum())
    if read.numel() - count < FEWEST_SKIPPED or count < FEWEST_READ:
        return None
    return read.reshape(-1).nonzero()[:, 0]


_COMPUTED: ContextVar[Computed | None] = ContextVar("mtdecode_tokenwise_computed", default=None)


@contextlib.contextmanager
def computing_only(
    read: Bool[Tensor, "batch new"], logits_kept: Bool[Tensor, "batch kept"]
) -> Iterator[Computed | None]:
    """Within the block, switched layers compute only the cells `read` (MLPs) and `logits_kept` (the output
    layer, over the logits the forward keeps), each where skipping pays (`skipping`)."""
    computed = Computed(skipping(read), read.numel(), skipping(logits_kept), logits_kept.numel())
    if computed.tokens is None and computed.logits is None:
        yield None
        return
    token = _COMPUTED.set(computed)
    try:
        yield computed
    finally:
        _COMPUTED.reset(token)


@no_type_check  # per layer per forward (see `mtdecode.tensor_types`)
def _on_read_cells(forward, x: Float[Tensor, "*cells dim"], index: Int[Tensor, " read"], out_dim: int) -> Tensor:
    """`forward(x)` computed on the read cells only (gathered as one block), zeros elsewhere."""
    cells = x.numel() // x.shape[-1]
    flat = x.reshape(cells, x.shape[-1])
    block = forward(flat.index_select(0, index)[None])[0]  # (read, out)
    out = flat.new_zeros(cells, out_dim)
    out.index_copy_(0, index, block)
    return out.reshape(*x.shape[:-1], out_dim)


class _SkipsTokens:
    """Mixin for a token-wise MLP (output as wide as its input): computes only the forward's read cells."""

    @no_type_check
    def forward(self, x: Tensor, *args, **kwargs) -> Tensor:
        computed = _COMPUTED.get()
        if computed is None or computed.tokens is None or args or kwargs or x.numel() // x.shape[-1] != computed.cells:
            return super().forward(x, *args, **kwargs)
        return _on_read_cells(super().forward, x, computed.tokens, x.shape[-1])


class _SkipsLogits:
    """Mixin for the output layer (a linear layer): computes only the logits the forward reads."""

    @no_type_check
    def forward(self, x: Tensor) -> Tensor:
        computed = _COMPUTED.get()
        if computed is None or computed.logits is None or x.numel() // x.shape[-1] != computed.logit_cells:
            return super().forward(x)
        return _on_read_cells(super().forward, x, computed.logits, self.out_features)


_SWITCHED: dict[tuple[type, type], type] = {}


def _switch(module: nn.Module, mixin: type) -> None:
    """Give `module` the class `mixin` + its own class (made once per pair), in place."""
    cls = type(module)
    if issubclass(cls, mixin):
        return
    key = (cls, mixin)
    if key not in _SWITCHED:
        _SWITCHED[key] = type(f"{mixin.__name__.strip('_')}{cls.__name__}", (mixin, cls), {"tokenwise_of": cls})
    module.__class__ = _SWITCHED[key]


def tokenwise_skips(model: nn.Module) -> nn.Module:
    """Switch `model`'s token-wise layers to skip unread cells under `computing_only`, in place; returns `model`.
    The switched layers are every decoder layer's `mlp` whose class is named as an MLP (a mixture of experts routes
    tokens and is left alone) and the output layer if it is a linear layer."""
    for module in model.modules():
        mlp = getattr(module, "mlp", None)
        if isinstance(mlp, nn.Module) and type(mlp).__name__.endswith("MLP"):
            _switch(mlp, _SkipsTokens)
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if isinstance(output, nn.Linear):
        _switch(output, _SkipsLogits)
    return model


__all__ = ["FEWEST_READ", "FEWEST_SKIPPED", "Computed", "computing_only", "skipping", "tokenwise_skips"]
