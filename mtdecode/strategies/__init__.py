"""Decoding strategies, one per file, and a registry of them by name.

Every strategy implements `mtdecode.DecodingStrategy`. `REGISTRY` maps a short name
(as used by the demo and the command line) to the strategy class.
"""

from mtdecode.strategies.autoregressive import Autoregressive

#: strategy name -> class; every strategy added to the library is listed here
REGISTRY: dict[str, type] = {
    "autoregressive": Autoregressive,
}

__all__ = ["REGISTRY", "Autoregressive"]
