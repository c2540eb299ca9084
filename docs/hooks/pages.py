"""The docs site's own build steps: an mkdocs hook (`hooks:` in mkdocs.yml).

The site must work with no network and read well in both colour schemes. This module:

- turns TeX into MathML at build time (latex2mathml), which browsers draw natively: no MathJax, no
  fonts, no JavaScript. In the Markdown pages `pymdownx.arithmatex` (generic mode) marks the math; in
  the notebooks nbconvert's Markdown renderer is taught to mark it the same way, so a `\\$` that the
  author escaped stays a dollar and math inside code stays code;
- on the notebook pages, removes the scripts nbconvert adds that load MathJax and mermaid from CDNs,
  folds each cell tagged `solution` into a closed `<details>` block, and leaves code cells and their
  outputs out of the search index (prose ranks first);
- on the API pages, leaves the source listings out of the search index and ranks the pages below the
  prose (a search for "cache" should find the KV-cache page before `KVCache`'s reference);
- shows a picture `img/NAME.png` that has a twin `img/dark/NAME.png` (docs/render_figures.py draws
  both) in the light scheme, and the twin in the dark one.
"""

import html
import logging
import posixpath
import re
from collections.abc import Callable

from latex2mathml.converter import convert

log = logging.getLogger("mkdocs.hooks.pages")

# ---- math ----------------------------------------------------------------------------------------

#: a piece of math as arithmatex marks it: `\(...\)` inline, `\[...\]` displayed (the TeX is HTML-escaped)
MARKED_MATH = re.compile(r'<(?P<tag>span|div) class="arithmatex">(?P<tex>.*?)</(?P=tag)>', re.DOTALL)
#: what latex2mathml leaves of a command it does not know: the command's name, backslash and all
UNKNOWN_COMMAND = re.compile(r"\\[A-Za-z]+")


def mathml(tex: str, *, display: bool) -> str:
    """The MathML of one formula.

    **Raises:** `ValueError` if the TeX uses a command latex2mathml does not know (it would show as text).
    """
    rendered = convert(tex, display="block" if display else "inline")
    unknown = UNKNOWN_COMMAND.search(rendered)
    if unknown:
        raise ValueError(f"TeX command {unknown.group()} is not supported by latex2mathml, in: {tex}")
    return rendered


def render_math(page_html: str) -> str:
    """Every arithmatex mark in `page_html` replaced by its MathML, in a `<span|div class="math">`.

    **Raises:** `ValueError` on TeX that cannot be drawn (see `mathml`).
    """

    def replace(mark: re.Match) -> str:
        tex = html.unescape(mark["tex"]).strip()
        display = not tex.startswith("\\(")
        if tex[:2] in ("\\(", "\\["):
            tex = tex[2:-2]
        return f'<{mark["tag"]} class="math">{mathml(tex.strip(), display=display)}</{mark["tag"]}>'

    return MARKED_MATH.sub(replace, page_html)


#: math in a table-of-contents title: mkdocs-jupyter takes the titles from the notebook's Markdown source
TITLE_MATH = re.compile(r"(?<![\\$])\$(?P<dollar>[^$\s](?:[^$]*?[^$\s])?)\$|\\\((?P<round>.+?)\\\)")


def render_title_math(title: str) -> str:
    """A table-of-contents title with its `$...$` (or `\\(...\\)`) math as MathML.

    **Raises:** `ValueError` on TeX that cannot be drawn (see `mathml`).
    """
    return TITLE_MATH.sub(lambda m: mathml(html.unescape(m["dollar"] or m["round"]), display=False), title)


def render_toc_math(items) -> None:
    """`render_title_math` on every entry of a page's table of contents (mkdocs `AnchorLink`s), in place."""
    for item in items:
        item.title = render_title_math(item.title)
        render_toc_math(item.children)


def mark_notebook_math() -> None:
    """Make nbconvert's Markdown renderer mark math as arithmatex does, for `render_math`.

    nbconvert's parser already finds the math (`$...$`, `$$...$$`, `\\(...\\)`, `\\[...\\]`, environments)
    and knows `\\$` and code spans are not math; unchanged, it writes the math back as `$...$` text,
    where an escaped dollar can no longer be told apart.
    """
    from nbconvert.filters.markdown_mistune import IPythonRenderer

    # display math sits inside a paragraph here, so it is marked with a span too
    IPythonRenderer.inline_math = lambda self, body: f'<span class="arithmatex">\\({html.escape(body)}\\)</span>'
    IPythonRenderer.block_math = lambda self, body: f'<span class="arithmatex">\\[{html.escape(body)}\\]</span>'
    IPythonRenderer.latex_environment = lambda self, name, body: (
        f'<span class="arithmatex">\\[\\begin{{{name}}}{html.escape(body)}\\end{{{name}}}\\]</span>'
    )


# ---- notebook pages ------------------------------------------------------------------------------

SCRIPT = re.compile(r"<script\b(?P<attributes>[^>]*)>(?P<body>.*?)</script>", re.DOTALL)
#: a script that would load something from another host: by its src, or by an import in its body
REMOTE_SOURCE = re.compile(r'\bsrc="(?:[a-z]+:)?//|\bsrc=""')
REMOTE_IMPORT = re.compile(r"""\bimport\s*\(\s*["'](?:https?:)?//|\bfrom\s+["'](?:https?:)?//""")


def remove_remote_scripts(page_html: str) -> str:
    """`page_html` without the scripts that load code from a CDN, nor MathJax's configuration
    (nbconvert's MathJax loader, with an empty or remote src, and its mermaid loader, which imports one)."""

    def keep(script: re.Match) -> str:
        remote = REMOTE_SOURCE.search(script["attributes"]) or REMOTE_IMPORT.search(script["body"])
        mathjax = "text/x-mathjax-config" in script["attributes"]
        return "" if remote or mathjax else script.group()

    return SCRIPT.sub(keep, page_html)


DIV_TAG = re.compile(r"<(/?)div\b[^>]*>")
SOLUTION_CELL = re.compile(r'<div\b[^>]*\bclass="[^"]*\bcelltag_solution\b[^"]*"[^>]*>')


def closing_end(page_html: str, start: int) -> int:
    """Where the `<div>` that opens at `start` ends: the index just past its `</div>`.

    **Raises:** `ValueError` if it is never closed.
    """
    depth = 0
    for tag in DIV_TAG.finditer(page_html, start):
        depth += -1 if tag[1] else 1
        if depth == 0:
            return tag.end()
    raise ValueError(f"a <div> at character {start} is never closed")


def fold_solutions(page_html: str) -> str:
    """Each notebook cell tagged `solution` (nbconvert gives it the class `celltag_solution`), input and
    output, inside a closed `<details class="solution">`; other cells (the `check` ones too) stay open."""
    pieces, position = [], 0
    while cell := SOLUTION_CELL.search(page_html, position):
        end = closing_end(page_html, cell.start())
        pieces += [page_html[position : cell.start()], '<details class="solution"><summary>Solution</summary>']
        pieces += [page_html[cell.start() : end], "</details>"]
        position = end
    return "".join(pieces) + page_html[position:]


#: how the API reference ranks in search against the prose pages (mkdocs-material's `search.boost`, default 1)
API_SEARCH_BOOST = 0.25
CODE_CELL = re.compile(r'<div (?=[^>]*\bclass="[^"]*\bjp-CodeCell\b)')
SOURCE_LISTING = re.compile(r'<details class="mkdocstrings-source">')


def exclude_code_from_search(page_html: str) -> str:
    """Notebook code cells (with their outputs) and the API pages' source listings marked
    `data-search-exclude`, so that mkdocs-material's search indexes the prose around them."""
    page_html = CODE_CELL.sub("<div data-search-exclude ", page_html)
    return SOURCE_LISTING.sub('<details class="mkdocstrings-source" data-search-exclude>', page_html)


# ---- figures -------------------------------------------------------------------------------------

PICTURE = re.compile(r'<img\b[^>]*\bsrc="(?P<src>(?:[^"#]*/)?img/(?P<name>[^"/#]+))"[^>]*>')


def pair_dark_figures(page_html: str, page_url: str, exists: Callable[[str], bool]) -> str:
    """Each `<img>` of `img/NAME` whose dark twin `img/dark/NAME` `exists` (a path in the site) shown
    twice, with mkdocs-material's `#only-light` and `#only-dark` suffixes. `page_url` is the page's
    own URL, against which the (relative) `src` is resolved."""

    def pair(picture: re.Match) -> str:
        src = picture["src"]
        dark = src[: -len(picture["name"])] + "dark/" + picture["name"]
        if not exists(posixpath.normpath(posixpath.join(posixpath.dirname("/" + page_url), dark)).lstrip("/")):
            return picture.group()
        tag = picture.group()
        return tag.replace(f'"{src}"', f'"{src}#only-light"') + tag.replace(f'"{src}"', f'"{dark}#only-dark"')

    return PICTURE.sub(pair, page_html)


# ---- the hooks -----------------------------------------------------------------------------------


def on_config(config):
    """Before any page is read: nbconvert marks notebook math (see `mark_notebook_math`)."""
    mark_notebook_math()
    return config


def on_page_content(page_html: str, page, config, files) -> str:
    """Each page's HTML, after Markdown or nbconvert made it and before the search index reads it."""
    try:
        page_html = render_math(page_html)
        render_toc_math(page.toc)
    except ValueError as error:
        log.warning("%s: %s", page.file.src_uri, error)  # a warning fails `mkdocs build --strict`
    if page.file.src_uri.endswith(".ipynb"):
        page_html = fold_solutions(remove_remote_scripts(page_html))
    page_html = exclude_code_from_search(page_html)
    if page.file.src_uri.startswith("api/"):
        page.meta.setdefault("search", {}).setdefault("boost", API_SEARCH_BOOST)  # read when the index is built
    return pair_dark_figures(page_html, page.url, lambda path: files.get_file_from_path(path) is not None)
