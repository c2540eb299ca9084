"""Reusable checks: the oracle for decoders, tiny models, greedy parity, and statistical tests with
stated false-alarm rates.

Other projects use these as the oracle for their own decoders, in three lines:

```python
from mtdecode.testing import assert_conforms, check_greedy, check_sampling, check_seeds
from mypackage import my_decoder          # decoder(model, prompt, *, max_new_tokens, temperature, top_k, top_p, seed)
assert_conforms(check_greedy(my_decoder), check_sampling(my_decoder), check_seeds(my_decoder))
```

Every report has a verdict ("conforms", "fails", "crashed", "inconclusive") and says what the check saw the
decoder do (`mtdecode.testing.coverage`): a decoder that never verified a guess is not called conforming.
"""

from mtdecode.testing.blackbox import GREEDY_MODELS, check_greedy, check_sampling
from mtdecode.testing.bridge import remote_decoder
from mtdecode.testing.coverage import Coverage
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
from mtdecode.testing.seeds import check_seeds
from mtdecode.testing.stats import GoodnessOfFit, assert_matches, chi_square_test, detectable_tv
from mtdecode.testing.trees import check_tree_sampler

__all__ = [
    "FAMILIES",
    "GREEDY_MODELS",
    "Coverage",
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
    "check_seeds",
    "check_tree_sampler",
    "chi_square_test",
    "detectable_tv",
    "first_divergence",
    "greedy_tokens",
    "hf_decoder",
    "hf_greedy_tokens",
    "remote_decoder",
    "strategy_decoder",
    "tiny_model",
]
