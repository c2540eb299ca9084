"""The `DecodingStrategy` protocol: what `mtdecode.generate` needs from a strategy."""

from collections.abc import Iterator, Sequence
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


def check_counts(strategy: object, names: Sequence[str], *, optional: Sequence[str] = ()) -> None:
    """Raise ValueError unless each named setting of `strategy` is an integer >= 1 (None allowed for `optional`)."""
    for name in names:
        value = getattr(strategy, name)
        if value is None and name in optional:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def check_chance(name: str, value: float) -> None:
    """Raise ValueError unless `value` (the setting called `name`) is a chance in [0, 1]."""
    if not 0 <= value <= 1:
        raise ValueError(f"{name} must be a chance in [0, 1], got {value}")
