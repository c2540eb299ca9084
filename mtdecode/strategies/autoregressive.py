"""Autoregressive decoding: one target forward pass, one token per row. The baseline every
other strategy is compared with, token for token (greedy) or in distribution (sampling).
Its loop and steps are `mtdecode.plain`'s, which every strategy's plain steps share, and which the cost probes
time as plain steps (`mtdecode.costs.probes`), below the strategies.
"""

from mtdecode.plain import Autoregressive

__all__ = ["Autoregressive"]
