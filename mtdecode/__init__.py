"""mtdecode: a typed, educational reference library of LLM decoding strategies.

```python
import mtdecode
from mtdecode.strategies import Autoregressive

model = mtdecode.load_model("smollm2-135m-instruct")
result = mtdecode.generate(model, [1, 2, 3], Autoregressive(), max_new_tokens=16)
```
"""

import os

if os.environ.get("MTDECODE_TYPECHECK", "").lower() in ("1", "true", "yes"):
    # Opt-in runtime checking of every jaxtyping annotation in the package (slow). beartype and transformers' model
    # code are imported first: a module first imported while the hook runs an mtdecode module finds no bytecode
    # under the hook's cache name and is compiled from source, which takes several times as long. tests/conftest.py
    # does the same for jaxtyping's pytest plugin, whose hook is in place before any mtdecode module can run.
    import beartype  # noqa: F401
    import transformers.modeling_utils  # noqa: F401
    from jaxtyping import install_import_hook

    install_import_hook("mtdecode", "beartype.beartype")

from mtdecode.cache import KVCache  # noqa: E402
from mtdecode.generate import GenerationResult, GreedyFallbackWarning, Stats, generate  # noqa: E402
from mtdecode.model import CausalLM, Runner, UnsupportedModelError  # noqa: E402
from mtdecode.sampling import Sampler  # noqa: E402
from mtdecode.session import Choice, InvariantError, Session, Step  # noqa: E402
from mtdecode.strategy import DecodingStrategy  # noqa: E402
from mtdecode.zoo import DEFAULT_MODEL, DRAFT_MODEL, load_model, load_tokenizer  # noqa: E402

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MODEL",
    "DRAFT_MODEL",
    "CausalLM",
    "Choice",
    "DecodingStrategy",
    "GenerationResult",
    "GreedyFallbackWarning",
    "InvariantError",
    "KVCache",
    "Runner",
    "Sampler",
    "Session",
    "Stats",
    "Step",
    "UnsupportedModelError",
    "generate",
    "load_model",
    "load_tokenizer",
]
