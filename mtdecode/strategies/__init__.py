"""Decoding strategies, one per file, and a registry of them by name.

Every strategy implements `mtdecode.DecodingStrategy`. `REGISTRY` maps a short name
(as used by the demo and the command line) to the strategy class; `needs_draft(cls)`
says whether it must be given a draft model.
"""

import dataclasses

from mtdecode.strategies.autoregressive import Autoregressive
from mtdecode.strategies.eagle import Eagle
from mtdecode.strategies.jacobi import Jacobi
from mtdecode.strategies.lookahead import Lookahead
from mtdecode.strategies.mmtad import MMTAD
from mtdecode.strategies.mtad import MTAD
from mtdecode.strategies.prompt_lookup import PromptLookup
from mtdecode.strategies.speculative import Speculative

#: strategy name -> class; every strategy added to the library is listed here
REGISTRY: dict[str, type] = {
    "autoregressive": Autoregressive,
    "speculative": Speculative,
    "jacobi": Jacobi,
    "prompt_lookup": PromptLookup,
    "lookahead": Lookahead,
    "mtad": MTAD,
    "mmtad": MMTAD,
    "eagle": Eagle,
}


def needs_draft(strategy_class: type) -> bool:
    """Whether the strategy is built with a `draft` model."""
    return any(f.name == "draft" for f in dataclasses.fields(strategy_class))


__all__ = [
    "REGISTRY", "Autoregressive", "Eagle", "Jacobi", "Lookahead", "MMTAD", "MTAD", "PromptLookup", "Speculative",
    "needs_draft",
]  # fmt: skip
