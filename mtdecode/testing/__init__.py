"""Reusable checks: the oracle for decoders, tiny models, greedy parity, and statistical tests with
stated false-alarm rates.

Other projects use these as the oracle for their own decoders, in three lines:

```python
from mtdecode.testing import assert_conforms, check_greedy, check_sampling
from mypackage import my_decoder          # decoder(model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed)
assert_conforms(check_greedy(my_decoder), check_sampling(my_decoder))
```
"""

from mtdecode.testing.blackbox import check_greedy, check_sampling
from mtdecode.testing.decoders import Decoder, DecoderError, hf_decoder, strategy_decoder
from mtdecode.testing.kernels import check_beam_sampler, check_rejection_sampler
from mtdecode.testing.models import FAMILIES, tiny_model
from mtdecode.testing.parity import (
    NearTie,
    assert_greedy_parity,
    first_divergence,
    greedy_tokens,
    hf_greedy_tokens,
)
from mtdecode.testing.report import Report, assert_conforms
from mtdecode.testing.stats import GoodnessOfFit, assert_matches, chi_square_test, detectable_tv

__all__ = [
    "FAMILIES",
    "Decoder",
    "DecoderError",
    "GoodnessOfFit",
    "NearTie",
    "Report",
    "assert_conforms",
    "assert_greedy_parity",
    "assert_matches",
    "check_beam_sampler",
    "check_greedy",
    "check_rejection_sampler",
    "check_sampling",
    "chi_square_test",
    "detectable_tv",
    "first_divergence",
    "greedy_tokens",
    "hf_decoder",
    "hf_greedy_tokens",
    "strategy_decoder",
    "tiny_model",
]
