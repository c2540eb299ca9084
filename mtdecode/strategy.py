"""The `DecodingStrategy` protocol: what `mtdecode.generate` needs from a strategy."""

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from mtdecode.session import Session, Step


@runtime_checkable
class DecodingStrategy(Protocol):
    """A way of choosing the next tokens, one target forward pass per step, for a batch of rows.

    `decode` is a generator: it runs the target (and any draft) through the session's
    runners over every row at once, commits each row's tokens with `session.commit(...)`
    and yields the steps it gets back (one per unfinished row). `generate` checks the cache
    invariant after every yield and stops pulling once `session.done` is set. All per-call
    state lives inside `decode`, so nothing leaks from one `generate` call into the next;
    per-row state (a window, a pool, beams) has a leading batch axis or one entry per row.
    """

    def decode(self, session: Session) -> Iterator[list[Step]]: ...
