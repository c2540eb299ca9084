"""What a check saw a decoder do: the forward passes of the model it was handed, and their sizes.

A check that passes says little if the path under test never ran: a lookahead decoder whose
window never fills, or a speculative sampler that quietly falls back to plain sampling, gives
exactly the right tokens without ever verifying a guess. So while a check runs, `watching(model)`
records every forward of the model the check hands the decoder (a forward pre-hook; the draft
models a decoder brings are not counted), and the report says how often a forward verified more
than one token.

A forward's **new tokens** are the tokens it feeds beyond what the model has already seen in
this call: all it feeds when it is given a filled cache, or, for a decoder that keeps no cache,
what it feeds beyond the previous forward's input. The first forward of a call is its
**prefill**; a later forward with more than one new token per row is a **verification**. A
call that verified a guess, or committed more tokens than it made forwards, ran its **guessed
path**, with every row it decoded (in a padded batch every row's guess is verified in the same
forwards). A decoder that never did either never tested a guess: the check then ends *inconclusive*.

An engine that runs its own copy of the model (llama.cpp's programs on a GGUF file) makes no
forward this process can see; it reports instead how many tokens it drafted and how many of them
were accepted (`reported`), and a call that drafted or accepted any ran its guessed path. An engine that
decodes a batch and counts each request apart (vLLM) also says how many of the batch's rows drafted or accepted
any: only those count as rows that ran the guessed path.
"""

import contextlib
import threading
from dataclasses import dataclass, field
from typing import no_type_check

from mtdecode.testing.bridge_worker import cached_length, fed_tokens  # the worker counts as we do


@dataclass
class Coverage:
    """Forward passes seen during one check (see the module docstring)."""

    calls: int = 0
    forwards: int = 0
    prefills: int = 0
    verifications: int = 0
    #: new tokens per row of each verification, summed
    verified_tokens: int = 0
    #: tokens committed (the longest row of each call, summed) and the forwards of those calls
    committed: int = 0
    #: calls that committed more tokens than they made forwards: at least one forward gave more than one token
    calls_ahead: int = 0
    #: calls that ran their guessed path: a verification, tokens ahead of forwards, or drafts an engine reported
    calls_guessing: int = 0
    #: rows (prompts) decoded, and the rows of the calls that ran their guessed path
    rows: int = 0
    rows_guessing: int = 0
    #: tokens an engine reported it drafted for verification, and accepted (engines that run their own model)
    drafted: int = 0
    accepted: int = 0
    _call: dict = field(default_factory=dict, repr=False)

    @property
    def guessed(self) -> bool:
        """Whether the decoder verified a guess at least once (or committed more tokens than forwards)."""
        return self.verifications > 0 or self.calls_ahead > 0 or self.calls_guessing > 0

    @property
    def guessing_share(self) -> float:
        """The share of rows (prompts) whose call ran its guessed path (0.0 before any call)."""
        return self.rows_guessing / max(self.rows, 1)

    @property
    def tokens_per_forward(self) -> float:
        """Committed tokens per forward, over all calls (1.0 or less for a decoder that never guesses)."""
        return self.committed / max(self.forwards, 1)

    @no_type_check  # plain values, per decoder call and per forward (see `mtdecode.tensor_types`)
    def begin_call(self) -> None:
        """A decoder call starts: the next forward is its prefill."""
        self.calls += 1
        self._call = {"forwards": 0, "last_fed": 0, "guessing": False}

    @no_type_check
    def end_call(self, outputs: list) -> None:
        """A decoder call ended with these rows."""
        longest = max((len(o) for o in outputs), default=0)
        self.committed += longest
        ahead = longest > self._call.get("forwards", 0) > 0
        guessing = ahead or self._call.get("guessing", False)
        self.calls_ahead += int(ahead)
        self.calls_guessing += int(guessing)
        self.rows += len(outputs)
        self.rows_guessing += self._call.get("rows_guessing", len(outputs)) if guessing else 0
        self._call = {}

    @no_type_check
    def reported(self, *, drafted: int | None, accepted: int, rows_guessing: int | None = None) -> None:
        """What an engine running its own model said of the current call: tokens drafted (None: it does not say)
        and tokens accepted, and, for a batch whose engine counts each row apart, how many of its rows drafted or
        accepted any (None: every row of a call that did counts)."""
        self.drafted += drafted or 0
        self.accepted += accepted
        if self._call and ((drafted or 0) > 0 or accepted > 0):
            self._call["guessing"] = True
        if self._call and rows_guessing is not None:
            self._call["rows_guessing"] = rows_guessing

    @no_type_check
    def record(self, fed: int, cached: int | None) -> None:
        """One forward that fed `fed` tokens per row, with `cached` tokens already in its cache (None: no cache)."""
        call = self._call
        if not call:  # a forward outside any decoder call (the check's own reference): not the decoder's
            return
        new = fed if cached else fed - call["last_fed"]  # a cache holds what came before; else the last input did
        self.forwards += 1
        if call["forwards"] == 0:
            self.prefills += 1
        elif new > 1:
            self.verifications += 1
            self.verified_tokens += new
            call["guessing"] = True
        call["forwards"] += 1
        call["last_fed"] = fed
        self._call = call

    _COUNTS = (
        "calls", "forwards", "prefills", "verifications", "verified_tokens", "committed", "calls_ahead",
        "calls_guessing", "rows", "rows_guessing", "drafted", "accepted",
    )

    def merge(self, other: "Coverage") -> None:
        """Add another check's counts (a decoder run in another process reports its own)."""
        for name in self._COUNTS:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_json(self) -> dict:
        return {
            "calls": self.calls,
            "forwards": self.forwards,
            "prefills": self.prefills,
            "verifications": self.verifications,
            "verified_tokens": self.verified_tokens,
            "committed": self.committed,
            "calls_ahead": self.calls_ahead,
            "calls_guessing": self.calls_guessing,
            "rows": self.rows,
            "rows_guessing": self.rows_guessing,
            "drafted": self.drafted,
            "accepted": self.accepted,
            "tokens_per_forward": round(self.tokens_per_forward, 3),
        }

    def __str__(self) -> str:
        guessing = (
            f"{self.calls_guessing} of {self.calls} calls ran the guessed path"
            + (f" ({self.guessing_share:.0%})" if self.rows == self.calls else
               f", {self.rows_guessing} of their {self.rows} rows ({self.guessing_share:.0%})")
        )
        if self.forwards == 0 and (self.drafted or self.accepted):
            return (
                f"coverage, as the engine reported it: {self.drafted} tokens drafted and {self.accepted} accepted "
                f"over {self.calls} decoder calls ({self.committed} tokens committed); {guessing}"
            )
        if self.forwards == 0:
            return f"coverage: {self.calls} decoder calls, no forward of the oracle's model seen; {guessing}"
        after = self.forwards - self.prefills
        share = self.verifications / max(after, 1)
        return (
            f"coverage: {self.calls} decoder calls made {self.forwards} forwards of the oracle's model; "
            f"{self.verifications} of the {after} after a prefill verified more than one token "
            f"({share:.0%}, {self.verified_tokens} tokens), {self.calls_ahead} of {self.calls} calls committed more "
            f"tokens than they made forwards, {self.tokens_per_forward:.2f} tokens committed per forward; {guessing}"
        )


_ACTIVE = threading.local()


def active() -> Coverage | None:
    """The coverage being recorded by the check now running, if any (a bridge to another process adds to it)."""
    return getattr(_ACTIVE, "coverage", None)


@contextlib.contextmanager
def watching(model, coverage: Coverage):
    """Record every forward of `model` (a transformers model) in `coverage` while the block runs."""

    @no_type_check
    def hook(module, args, kwargs):
        if module is model:  # a deep copy of the model (a draft made from it) carries the hook: ignore its calls
            coverage.record(fed_tokens(args, kwargs), cached_length(kwargs))

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    previous = active()
    _ACTIVE.coverage = coverage
    try:
        yield coverage
    finally:
        handle.remove()
        _ACTIVE.coverage = previous
