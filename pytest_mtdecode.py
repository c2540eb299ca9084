"""The pytest plugin of `mtdecode.testing`, registered through the `pytest11` entry point: after
installing mtdecode (from a clone: `pip install torch==2.13.0`, then `pip install .`; it is not on PyPI),
any project's tests can ask for these fixtures.

```python
def test_my_decoder(decoding_oracle):
    decoding_oracle.assert_conforms(my_decoder, sampling=True)

def test_my_decoder_runs_on_every_family(tiny_model):   # each of check_greedy's tiny models in turn
    assert len(my_decoder(tiny_model, [1, 2, 3], max_new_tokens=4, temperature=0.0,
                          top_k=None, top_p=None, seed=0)) == 4
```

mtdecode is imported only when a fixture is used, so the plugin costs nothing to projects that do not.
It is a top-level module, not part of the `mtdecode` package, because pytest loads plugins before
any test, and importing a module of the package would import the package: too early for tools
that must see it imported afterwards (jaxtyping's import hook, in mtdecode's own tests).
"""

import pytest


class Oracle:
    """The checks of `mtdecode.testing`, bound together for one test (see `mtdecode.testing`)."""

    def __init__(self) -> None:
        from mtdecode import testing

        self.check_greedy = testing.check_greedy
        self.check_sampling = testing.check_sampling
        self.check_rejection_sampler = testing.check_rejection_sampler
        self.check_beam_sampler = testing.check_beam_sampler
        self.check_seeds = testing.check_seeds
        self.check_tree_sampler = testing.check_tree_sampler

    def assert_conforms(self, decoder, *, sampling: bool = False, dtype=None, model=None, **greedy_options) -> None:
        """Run `check_greedy` (and `check_sampling` and `check_seeds` if `sampling`) on `decoder`; fail with their
        summaries (an inconclusive or crashed check fails too). `dtype` (e.g. `torch.bfloat16`, judged exact up to
        ties), `model` (your own model or folder) and any other option of `check_greedy` (`families`, `examples`,
        `max_prompt`, ...) go to `check_greedy`."""
        from mtdecode.testing import assert_conforms

        greedy = self.check_greedy(decoder, dtype=dtype, model=model, **greedy_options)
        reports = [greedy] + ([self.check_sampling(decoder), self.check_seeds(decoder)] if sampling else [])
        assert_conforms(*reports)


@pytest.fixture
def decoding_oracle() -> Oracle:
    """The oracle: `decoding_oracle.check_greedy(decoder)`, `.check_sampling(decoder)`,
    `.check_rejection_sampler(fn)`, each returning a `Report`, and `.assert_conforms(decoder, sampling=True)`."""
    return Oracle()


@pytest.fixture(params=["llama", "qwen2", "mistral-window", "llama-32k", "llama-eos", "llama-ties"])
def tiny_model(request):
    """Each tiny random float64 causal LM of `check_greedy` in turn (`mtdecode.testing.GREEDY_MODELS`)."""
    from mtdecode.testing.blackbox import greedy_model

    return greedy_model(request.param)
