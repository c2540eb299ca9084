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
        (torch.zeros(1, 2, 3, dtype=torch.long), {}, r"shape \(batch, prompt\)"),
        ([1, 99], {}, r"prompt 0: token ids \[99\] are outside the vocabulary \[0, 32\)"),
        # a batch: each error names its row
        ([[1, 2], [], [3]], {}, "prompt 1 is empty"),
        ([[1, 2], [3], [4, 40]], {}, r"prompt 2: token ids \[40\] are outside the vocabulary"),
        ([[1, 2], [1] * 500], {"max_new_tokens": 20}, r"prompt 1 \(500 tokens\).*exceeds the model's context of 512"),
        ([[1, 2], [3]], {"pad_token_id": 32}, "pad_token_id 32 is not a token id"),
        ([[1, 2], [3]], {"eos_token_id": 5}, "pass pad_token_id="),
        ([[1, 2], [3]], {"seed": [1]}, "1 seeds for a batch of 2"),
        ([1, 2], {"seed": -1}, r"seed -1 must be an integer in \[0, 2\^62\)"),
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
    with pytest.raises((ValueError, TypeError), match="(?i)int"):
        mtdecode.generate(model(), [[1, 2], [3, 4.5]], Autoregressive())
