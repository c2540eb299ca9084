"""Autoregressive decoding: one target forward pass, one token per row. The baseline every
other strategy is compared with, token for token (greedy) or in distribution (sampling).
Its loop and steps are `mtdecode.plain`'s, which every strategy's plain steps share.
"""

from collections.abc import Iterator
from dataclasses import dataclass

from mtdecode.plain import decode_plainly
from mtdecode.session import Session, Step


@dataclass(frozen=True)
class Autoregressive:
    """Feed the newest token, sample the next from p, repeat (`mtdecode.plain.decode_plainly`)."""

    def decode(self, s: Session) -> Iterator[list[Step]]:
        return decode_plainly(s)
