"""Every tensor the library makes states its device: the model's, or the CPU on purpose (host bookkeeping made from
Python lists, moved to the model's device where it meets the model's tensors). A factory call without a device
would land on torch's default device, which is not the model's on a GPU; this test finds any such call in the
library's decoding path, on the CPU, by watching every tensor factory while every strategy decodes (greedy and
sampling, a batch of prompts of different lengths).
"""

import dataclasses
import sys
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

import mtdecode
from mtdecode.costs import DraftCosts
from mtdecode.policy import Adaptive
from mtdecode.strategies import REGISTRY, Eagle, needs_draft
from mtdecode.testing import tiny_model
from mtdecode.testing.models import perturbed
from mtdecode.zoo.eagle import EagleHead

LIBRARY = Path(mtdecode.__file__).parent
#: the library's own decoding path; its test tools, figures and training recipes are not part of it
OUTSIDE = ("testing", "masks/figures.py", "masks/plot.py", "recipes", "bench")
FACTORIES = {
    torch.tensor, torch.as_tensor, torch.zeros, torch.ones, torch.full, torch.empty, torch.arange, torch.eye,
    torch.rand, torch.randn, torch.randint, torch.linspace,
}  # fmt: skip


class DeviceWatch(TorchFunctionMode):
    """Records the file and line of every tensor factory called from the library without a device."""

    def __init__(self) -> None:
        super().__init__()
        self.undeclared: set[str] = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        from_tensor = func in (torch.tensor, torch.as_tensor) and args and isinstance(args[0], torch.Tensor)
        if func in FACTORIES and kwargs.get("device") is None and not from_tensor:  # a tensor's copy keeps its device
            caller = sys._getframe(1)
            path = Path(caller.f_code.co_filename)
            if path.is_relative_to(LIBRARY):
                where = path.relative_to(LIBRARY).as_posix()
                if not where.startswith(OUTSIDE):
                    self.undeclared.add(f"mtdecode/{where}:{caller.f_lineno} ({func.__name__})")
        return func(*args, **kwargs)


@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_every_tensor_the_library_makes_states_its_device(temperature):
    target = tiny_model("llama", vocab_size=16, seed=3)
    draft = perturbed(target, 0.3, seed=1)
    torch.manual_seed(2)
    head = EagleHead(target.config, target.get_input_embeddings().weight, target.get_output_embeddings().weight,
                     torch.arange(16)).to(target.dtype).eval()  # fmt: skip
    costs = DraftCosts(draft=0.1, target=[1.0, 1.1, 1.2, 1.3, 1.4, 1.5])
    watch = DeviceWatch()
    for cls in REGISTRY.values():
        if needs_draft(cls):  # the policy where the strategy takes one (MMTAD drafts the paper's k)
            takes_policy = any(field.name == "policy" for field in dataclasses.fields(cls))
            strategy = cls(draft, policy=Adaptive(costs=costs)) if takes_policy else cls(draft)
        elif cls is Eagle:
            strategy = Eagle(head, depth=3, width=2, policy=Adaptive(costs=costs, depth_cost=0.05))
        else:
            strategy = cls()
        with watch:
            mtdecode.generate(target, [[1, 2, 3, 1, 2, 4], [5, 6]], strategy, max_new_tokens=12,
                              temperature=temperature, seed=0, pad_token_id=0)  # fmt: skip
    assert not watch.undeclared, "tensors made without a device:\n" + "\n".join(sorted(watch.undeclared))
