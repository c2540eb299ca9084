"""Show which tokens each target forward pass committed, as coloured terminal text or an HTML page.

All tokens committed by one step (one target forward pass) share a colour, and the colour
changes from one step's text to the next, so a run of one colour is a step that accepted several tokens
at once. `mtdecode generate` feeds a `Trace` through `generate(..., on_step=trace.add)`.
"""

import html
import os
import sys
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from mtdecode.generate import Stats
from mtdecode.session import Step

#: ANSI foreground colours for the terminal, and matching background colours for HTML
ANSI = ("31", "32", "33", "34", "35", "36")
HTML = ("#ffd6d6", "#d4f5d4", "#fff2b3", "#d6e4ff", "#f3d6ff", "#c9f2f2")


@runtime_checkable
class TextStream(Protocol):
    """Anything text can be written to: `sys.stdout`, an open file, `io.StringIO`."""

    def write(self, text: str, /) -> int: ...

    def flush(self) -> None: ...


@dataclass
class Trace:
    """The answer so far, as (text, step index) pieces, optionally streamed to `stream`.

    **Arguments:**

    - `tokenizer`: turns token ids into text.
    - `stream`: where each piece is written as soon as it is committed (`None`: nowhere).
    - `color`: wrap each piece in its step's ANSI colour.
    """

    tokenizer: object
    stream: TextStream | None = None
    color: bool = False
    pieces: list[tuple[str, int]] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    _tokens: list[int] = field(default_factory=list)
    _shown: int = 0  # characters of the decoded answer already in `pieces`

    def add(self, step: Step) -> None:
        """Record one step and write its new text."""
        self.steps.append(step)
        self._tokens.extend(step.tokens)
        self._show(final=False)

    def finish(self) -> None:
        """Write what is still held back (bytes that never completed a character)."""
        if self.steps:
            self._show(final=True)

    def _show(self, final: bool) -> None:
        # decode the whole answer, not the step alone: a character may span two tokens
        text = self.tokenizer.decode(self._tokens, skip_special_tokens=True)
        if text.endswith("\ufffd") and not final:
            return  # maybe half a UTF-8 character: its rest comes with the next step (and its colour)
        new, self._shown = text[self._shown :], len(text)
        if not new:
            return  # e.g. the step committed only the end-of-turn token
        # colours go by piece, not by step: a step with no text of its own must not
        # leave its two neighbours in one colour
        code = ANSI[len(self.pieces) % len(ANSI)]
        self.pieces.append((new, len(self.steps) - 1))
        if self.stream is not None:
            self.stream.write(f"\x1b[{code}m{new}\x1b[0m" if self.color else new)
            self.stream.flush()

    def html(self, *, title: str, prompt: str, summary: str) -> str:
        """A self-contained HTML page (no external files) with the answer coloured by step."""
        spans = []
        for i, (piece, index) in enumerate(self.pieces):
            step = self.steps[index]
            tip = f"step {index + 1}: {len(step.tokens)} token(s), {step.accepted} guessed token(s) accepted"
            colour = HTML[i % len(HTML)]
            spans.append(f'<span style="background:{colour}" title="{tip}">{html.escape(piece)}</span>')
        return _PAGE.format(
            title=html.escape(title),
            prompt=html.escape(prompt),
            summary=html.escape(summary),
            answer="".join(spans),
        )


def summary_line(stats: Stats) -> str:
    """Tokens, target forwards, tokens per forward and tokens/s in one line."""
    return (
        f"{stats.new_tokens} tokens, {stats.target_forwards} target forwards, "
        f"{stats.tokens_per_forward:.2f} tokens per forward, {stats.tokens_per_second:.1f} tokens/s"
    )


def wants_color(choice: str) -> bool:
    """`always`, `never`, or `auto` (colour when standard output is a terminal and NO_COLOR is unset)."""
    if choice == "auto":
        return sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    return choice == "always"


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{title}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 50em; margin: 2em auto; line-height: 1.6; }}
.answer {{ white-space: pre-wrap; font-family: ui-monospace, monospace; border: 1px solid #ccc; padding: 1em; }}
.prompt {{ white-space: pre-wrap; color: #555; }}
</style>
</head>
<body>
<h1>{title}</h1>
<p class="prompt">{prompt}</p>
<p>Each colour is one target forward pass: a run of one colour is a step that committed
several tokens at once. Hover over a piece to see its step.</p>
<div class="answer">{answer}</div>
<p>{summary}</p>
</body>
</html>
"""
