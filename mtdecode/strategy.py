"""The `DecodingStrategy` protocol: what `mtdecode.generate` needs from a strategy."""

from collections.abc import Iterator
from typing import Protocol, runtime_checkable

from mtdecode.session import Session, Step


@runtime_checkable
class DecodingStrategy(Protocol):
    """A way of choosing the next tokens, one target forward pass per step.

    `decode` is a generator: it runs the target (and any draft) through the session's
    runners, commits tokens with `session.commit(...)` and yields each `Step` it gets
    back. `generate` checks the cache invariant after every yield and stops pulling
    once `session.done` is set. All per-call state lives inside `decode`, so nothing
    leaks from one `generate` call into the next.
    """

    #: the largest batch of prompts the strategy decodes at once
    max_batch_size: int

    def decode(self, session: Session) -> Iterator[Step]: ...
