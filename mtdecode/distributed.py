"""Several processes, one decoding: what mtdecode does when `torch.distributed` runs it on more than one rank.

A model loaded with a `tp_plan` under `torchrun` is sharded (tensor parallelism): each rank holds a slice of every
layer, and each forward pass ends its layers with collectives in which every rank takes part. So every rank must make
the same forwards, in the same order, over the same shapes, or the collectives wait for ever. mtdecode's choices
follow from the tokens, the seeds and the measurements it keeps (`mtdecode.store`); this module makes those alike:

- `agreed(value)`: rank 0's value, on every rank. A measured cost, a timing inside a measurement
  (`mtdecode.costs.timing.seconds`) and a fresh seed are agreed this way, so that no rank decides from its own clock.
- `check_alike(what, value)`: `RankMismatchError` on every rank where the ranks' values differ. `generate` checks its
  call on entry and each step's tokens after it, and `CausalLM` each forward's shape before a sharded model runs
  it, so a rank that would go its own way stops with an error instead of a hang.

All of this starts when the process first wraps a sharded model (`CausalLM`, `decode_together`): from then on
every rank must make the same calls (one program, as `torchrun` starts it). Before that, outside
`torch.distributed` or with one rank, both are no-ops: processes that each decode their own prompts on a whole model
(data parallelism) decide on their own.
"""

import hashlib
import pickle
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor


class RankMismatchError(RuntimeError):
    """The ranks of a distributed run hold different values where they must agree."""


#: whether this process decodes together with the other ranks (`decode_together`)
_TOGETHER = False


def decode_together() -> None:
    """From now on, this process decodes together with every rank of the default process group: measurements and
    fresh seeds are agreed. `CausalLM` calls it when it wraps a sharded model."""
    global _TOGETHER
    _TOGETHER = True


def ranks() -> int:
    """The number of ranks this process decodes with: the default process group's once a sharded model was wrapped
    (`decode_together`), else 1."""
    together = _TOGETHER and dist.is_available() and dist.is_initialized()
    return dist.get_world_size() if together else 1


def rank() -> int:
    """This process's rank in the default process group (0 outside `torch.distributed`)."""
    return dist.get_rank() if ranks() > 1 else 0


def agreed(value: Any) -> Any:
    """Rank 0's `value` (anything picklable), on every rank; `value` itself with one rank."""
    if ranks() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def gathered(value: Any) -> list[Any]:
    """Every rank's `value` (anything picklable), in order of rank, on every rank; `[value]` with one rank."""
    if ranks() == 1:
        return [value]
    values: list[Any] = [None] * ranks()
    dist.all_gather_object(values, value)
    return values


def check_alike(what: str, value: Any) -> None:
    """Raise `RankMismatchError` on every rank unless every rank passed an equal `value` (picklable); `what` names it
    in the message, beside each rank's value. One all-reduce of a digest where they agree."""
    if ranks() == 1:
        return
    digest = int.from_bytes(hashlib.sha256(pickle.dumps(value)).digest()[:7], "big")  # below 2^56
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else None
    extremes = torch.tensor([digest, -digest], dtype=torch.long, device=device)
    dist.all_reduce(extremes, op=dist.ReduceOp.MAX)  # the largest digest, and minus the smallest
    if int(extremes[0]) == -int(extremes[1]):
        return
    values = gathered(value)
    if any(other != values[0] for other in values[1:]):
        each = "; ".join(f"rank {r}: {v!r}"[:300] for r, v in enumerate(values))
        raise RankMismatchError(f"{what} differs across ranks, which must agree ({each})")


def is_sharded(model: torch.nn.Module) -> bool:
    """Whether some weight of `model` is a `DTensor` (sharded over ranks, as a `tp_plan` loads it)."""
    return any(isinstance(p, DTensor) for p in model.parameters())


def local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's shard of a `DTensor`; any other tensor as it is."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor
