"""Runtime shape and dtype checking: on for the whole package in the test suite (jaxtyping's
pytest plugin), off by default at import, and opt-in with MTDECODE_TYPECHECK=1."""

import os
import subprocess
import sys

import pytest
import torch

TYPE_ERROR = "(?i)type-check|jaxtyping|beartype"


def test_shapes_are_checked_in_tests():
    from mtdecode import masks

    with pytest.raises(Exception, match=TYPE_ERROR):
        masks.plot(torch.zeros(2, 3))  # a float tensor where a boolean mask is expected


def test_dtypes_are_checked_in_tests():
    from mtdecode.sampling import RowRandom, draw

    with pytest.raises(Exception, match=TYPE_ERROR):
        draw(torch.ones(1, 3, dtype=torch.long), RowRandom([0]))  # integer "probabilities"


PROGRAM = """
import torch, mtdecode
from mtdecode.sampling import RowRandom, draw
try:
    draw(torch.ones(1, 3, dtype=torch.long), RowRandom([0]))
except Exception as error:
    print(type(error).__module__, type(error).__name__)
"""


@pytest.mark.parametrize("flag, checked", [(None, False), ("1", True)])
def test_checking_at_import_is_opt_in(flag, checked):
    env = {k: v for k, v in os.environ.items() if k != "MTDECODE_TYPECHECK"}
    if flag is not None:
        env["MTDECODE_TYPECHECK"] = flag
    out = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, check=True).stdout
    assert ("jaxtyping" in out or "beartype" in out) == checked, out
