"""The teacher's slides: a reveal.js deck for the 90-minute lesson, built from the course's notebooks.

    python tutorials/slides.py OUT.html [--reveal DIR]   # what `make slides` runs

The deck follows the lesson plan of `docs/tutorials/index.md` ("One 90-minute lesson"): `PLAN` lists, per
block of minutes, the notebook sections it shows. Each section becomes a column of slides: its prose on the
first, then one slide per code cell with the cell's outputs. The executed notebooks of `docs/tutorials/` are
used when they exist (`make tutorials` writes them), so the slides show real outputs; otherwise the sources.
Solutions are left out. Math is drawn as MathML when the deck is built (the docs site's hook does it), and
reveal.js is read from a local folder (`make slides` unpacks it from the npm registry), so the deck shows
with no network.
"""

import argparse
import html
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path

import markdown
import nbformat

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


@dataclass(frozen=True)
class Block:
    """A block of the lesson: its minutes, a title, and the notebook sections (`## ` headings) it shows."""

    minutes: str
    title: str
    notebook: str
    sections: tuple[str, ...]


#: the 90-minute lesson, as the teacher's page plans it
PLAN = (
    Block("0-15", "What a decoding step is", "01_first_decode",
          ("Greedy decoding", "Steps and stats", "Sampling, and the seed")),
    Block("15-25", "Why guesses can be rolled back", "02_kv_cache_and_masks",
          ("What a cache entry is", "Crop: keep a prefix, drop the tail")),
    Block("25-60", "Speculative decoding, exact", "03_speculative",
          ("The rule", "Checked by exact enumeration", "The oracle catches it")),
    Block("60-85", "Your own strategy, proved", "07_your_own_strategy",
          ("The protocol", 'The starting code: "echo" guessing', "Prove it with the oracle")),
)  # fmt: skip

_hook_spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks" / "pages.py")
_hooks = importlib.util.module_from_spec(_hook_spec)
_hook_spec.loader.exec_module(_hooks)


def notebook(name: str, *, executed: bool = True) -> nbformat.NotebookNode:
    """The executed notebook if `make tutorials` (or `make test`) wrote it and `executed` asks for it, else its
    source (no outputs)."""
    path = ROOT / "docs" / "tutorials" / f"{name}.ipynb"
    if executed and path.exists():
        return nbformat.read(path, as_version=4)
    import jupytext

    return jupytext.read(HERE / f"{name}.py")


def section_cells(cells: list, title: str) -> list:
    """The cells of the section headed `## title`: from its heading to the next `## ` heading."""
    start = next((i for i, c in enumerate(cells) if c.cell_type == "markdown" and f"## {title}" in c.source), None)
    if start is None:
        raise ValueError(f"no section '## {title}' in the notebook: update `PLAN` in tutorials/slides.py")
    taken = [cells[start]]
    for cell in cells[start + 1 :]:
        if cell.cell_type == "markdown" and cell.source.lstrip().startswith("## "):
            break
        if "solution" not in cell.metadata.get("tags", []):
            taken.append(cell)
    return taken


def prose(text: str) -> str:
    """Markdown to HTML, with its math as MathML."""
    extensions = ["tables", "fenced_code", "pymdownx.arithmatex"]
    options = {"pymdownx.arithmatex": {"generic": True}}
    rendered = markdown.markdown(text, extensions=extensions, extension_configs=options)
    return _hooks.render_math(rendered)


def outputs(cell) -> str:
    """A code cell's outputs: text as preformatted text, pictures inline (data URLs)."""
    parts = []
    for out in cell.get("outputs", []):
        data = out.get("data", {})
        if "image/png" in data:
            parts.append(f'<img src="data:image/png;base64,{data["image/png"].strip()}" alt="figure">')
        elif out.get("output_type") == "stream" and out.get("name") == "stdout":
            parts.append(f'<pre class="output">{html.escape(out["text"])}</pre>')
        elif "text/plain" in data:
            parts.append(f'<pre class="output">{html.escape(data["text/plain"])}</pre>')
    return "\n".join(parts)


def slides_of(block: Block, *, executed: bool = True) -> str:
    """One vertical stack per section: the prose, then each code cell with its outputs."""
    cells = notebook(block.notebook, executed=executed).cells
    stacks = []
    for title in block.sections:
        slides = []
        for cell in section_cells(cells, title):
            if cell.cell_type == "markdown":
                slides.append(f"<section>{prose(cell.source)}</section>")
            elif cell.cell_type == "code" and cell.source.strip():
                code = html.escape(cell.source)
                slides.append(f'<section><pre><code class="python">{code}</code></pre>{outputs(cell)}</section>')
        stacks.append("<section>" + "\n".join(slides) + "</section>")
    where = f"minutes {block.minutes} · notebook {block.notebook[:2]}"
    opening = f"<section><h2>{html.escape(block.title)}</h2><p>{where}</p></section>"
    return opening + "\n" + "\n".join(stacks)


STYLE = """
.reveal { font-size: 26px; }
.reveal section { text-align: left; }
.reveal pre { width: 100%; font-size: 0.55em; box-shadow: none; }
.reveal pre code { max-height: 520px; }
.reveal pre.output { background: #f4f4f4; color: #222; padding: 0.4em; max-height: 260px; overflow: auto; }
.reveal img { max-height: 420px; }
"""


def deck(reveal: str, *, executed: bool = True) -> str:
    """The whole deck as one HTML page; `reveal` is the path (relative to the page) of the unpacked reveal.js;
    `executed`: show the outputs of the executed notebooks where they exist."""
    body = "\n".join(slides_of(block, executed=executed) for block in PLAN)
    title = "<section><h1>Speculative decoding, exact or not</h1><p>mtdecode · one 90-minute lesson</p></section>"
    closing = (
        "<section><h2>85-90: what a false-alarm rate means</h2><p>The oracle's statistical checks fail a correct "
        "decoder at most once in a thousand runs: a failure is evidence, and a rerun with another seed is the "
        "second opinion.</p></section>"
    )
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>mtdecode: one 90-minute lesson</title>
<link rel="stylesheet" href="{reveal}/dist/reveal.css">
<link rel="stylesheet" href="{reveal}/dist/theme/white.css">
<style>{STYLE}</style></head>
<body><div class="reveal"><div class="slides">
{title}
{body}
{closing}
</div></div>
<script src="{reveal}/dist/reveal.js"></script>
<script>Reveal.initialize({{hash: true, slideNumber: true, width: 1280, height: 800}});</script>
</body></html>
"""


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--reveal", default="reveal.js", help="where reveal.js is, relative to the deck")
    args = parser.parse_args(argv)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(deck(args.reveal))
    print(f"wrote {args.out} ({len(PLAN)} blocks)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
