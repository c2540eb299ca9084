"""Bad input gives a clear error before any work is done."""

import functools

import pytest
import torch

import mtdecode
from mtdecode.strategies import Autoregressive
from mtdecode.testing import tiny_model


@functools.cache
def model():
    return tiny_model("llama", vocab_size=32)


@pytest.mark.parametrize(
    "prompt, kwargs, message",
    [
        ([], {}, "prompt is empty"),
        (torch.zeros(1, 0, dtype=torch.long), {}, "prompt is empty"),
        ([1, 2], {"max_new_tokens": -1}, "max_new_tokens must be an integer >= 0"),
        ([1] * 500, {"max_new_tokens": 20}, "exceeds the model's context of 512"),
        (torch.tensor([[1.0, 2.0]]), {}, "integer token ids, got dtype torch.float32"),
        (torch.tensor([[True, False]]), {}, "integer token ids"),
        (torch.tensor([[1, 2], [3, 4]]), {}, "at most 1 sequence.*batch of 2"),
        (torch.zeros(1, 2, 3, dtype=torch.long), {}, r"shape \(batch, prompt\)"),
        ([1, 99], {}, r"\[99\] are outside the vocabulary \[0, 32\)"),
        ([1, 2], {"eos_token_id": 40}, "eos_token_id 40"),
        ([1, 2], {"eos_token_id": [True]}, "eos_token_id True"),
        ([1, 2], {"temperature": -0.1}, "temperature"),
        ([1, 2], {"top_p": 2.0}, "top_p"),
    ],
)
def test_bad_input_is_refused(prompt, kwargs, message):
    with pytest.raises(ValueError, match=message):
        mtdecode.generate(model(), prompt, Autoregressive(), **kwargs)


def test_zero_new_tokens_is_allowed():
    result = mtdecode.generate(model(), [1, 2], Autoregressive(), max_new_tokens=0)
    assert result.tokens.shape == (1, 0) and result.steps == [] and result.stats.target_forwards == 0


def test_a_one_dimensional_tensor_is_one_prompt():
    a = mtdecode.generate(model(), torch.tensor([1, 2, 3]), Autoregressive(), max_new_tokens=4)
    b = mtdecode.generate(model(), [1, 2, 3], Autoregressive(), max_new_tokens=4)
    assert torch.equal(a.tokens, b.tokens)


def test_a_list_with_non_integers_is_refused():
    # With type checking on (as in this suite) the annotation `Sequence[int]` catches it first;
    # with it off, generate's own check raises ValueError. Either way the message names the problem.
    with pytest.raises((ValueError, TypeError), match="(?i)int"):
        mtdecode.generate(model(), [1, 2.5], Autoregressive())
