"""Check a built docs site: it must load nothing from the network, and show no math as raw TeX.

Run after `mkdocs build` (`make test` does):

    .venv/bin/python docs/check_site.py build/site

It prints each problem with its page and exits 1 if there is any. What it looks for:

- a resource the browser would fetch from another host: `src`, `srcset` or `data` attributes, a
  `<link>` that loads something (a stylesheet, an icon, a preload), a JavaScript `import` or a CSS
  `url()`/`@import` pointing at `http://`, `https://` or `//`. Plain links (`<a href>`) are fine;
- math left as TeX in the visible text (outside code, preformatted text and MathML): `\\(...\\)`,
  `\\[...\\]`, `\\begin{...}`, or a `$...$` whose content looks like TeX (a backslash, `_`, `^` or a
  brace). A price such as "$5 and $10" is not math. Also a dollar sign right next to rendered math:
  a `$$...$$` inside a paragraph, which Markdown reads as `$` around inline math.
"""

import re
import sys
from html.parser import HTMLParser
from pathlib import Path

REMOTE = r"(?:https?:)?//"
#: attributes that make the browser fetch what they point at
FETCHED_ATTRIBUTE = re.compile(rf'\s(?:src|srcset|data|poster)\s*=\s*["\']?\s*{REMOTE}', re.IGNORECASE)
LINK_TAG = re.compile(r"<link\b[^>]*>", re.IGNORECASE)
#: the `<link rel>` kinds a browser does not fetch by itself
NOT_FETCHED_LINK = {"canonical", "next", "prev", "alternate", "author", "license", "help", "search"}
SCRIPT_IMPORT = re.compile(
    rf"""\bimport\s*\(\s*["']{REMOTE}|\bfrom\s+["']{REMOTE}|\bimportScripts\s*\(\s*["']{REMOTE}"""
)
CSS_FETCH = re.compile(rf"""url\(\s*["']?{REMOTE}|@import\s+(?:url\()?\s*["']?{REMOTE}""", re.IGNORECASE)
SCRIPT_OR_STYLE = re.compile(r"<(script|style)\b[^>]*>(.*?)</\1>", re.DOTALL | re.IGNORECASE)


def remote_requests(page_html: str) -> list[str]:
    """What in `page_html` would be fetched from another host (a snippet of each)."""
    found = []
    for tag in re.finditer(r"<[a-zA-Z][^>]*>", page_html):
        if FETCHED_ATTRIBUTE.search(tag.group()):
            found.append(tag.group())
    for link in LINK_TAG.finditer(page_html):
        rel = re.search(r'\brel="([^"]*)"', link.group())
        fetched = rel is None or not set(rel.group(1).lower().split()) <= NOT_FETCHED_LINK
        if fetched and re.search(rf'\bhref="{REMOTE}', link.group()):
            found.append(link.group())
    for block in SCRIPT_OR_STYLE.finditer(page_html):
        pattern = SCRIPT_IMPORT if block.group(1).lower() == "script" else CSS_FETCH
        found += [block.group(2)[max(0, m.start() - 40) : m.end() + 60] for m in pattern.finditer(block.group(2))]
    return found


class VisibleText(HTMLParser):
    """The text a reader sees as prose: outside code, preformatted text, MathML, scripts and styles,
    and outside the hidden copies of notebook code that the copy buttons use."""

    HIDDEN_TAGS = {"code", "pre", "math", "script", "style", "textarea", "kbd", "samp"}
    VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.open: list[tuple[str, bool]] = []  # (tag, hides its contents)
        self.pieces: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag in self.VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        self.open.append((tag, tag in self.HIDDEN_TAGS or "clipboard-copy-txt" in classes))

    def handle_endtag(self, tag: str) -> None:
        # an element left open (HTML allows `<p>` without `</p>`) is closed with its parent
        for depth in range(len(self.open) - 1, -1, -1):
            if self.open[depth][0] == tag:
                del self.open[depth:]
                return

    def handle_data(self, data: str) -> None:
        if not any(hidden for _, hidden in self.open):
            self.pieces.append(data)


TEX_DELIMITED = re.compile(r"\\\(.+?\\\)|\\\[.+?\\\]|\\begin\{[a-z*]+\}", re.DOTALL)
DOLLAR_MATH = re.compile(r"\$\$.+?\$\$|\$[^$\s][^$]*?\$", re.DOTALL)
LOOKS_LIKE_TEX = re.compile(r"[\\_^{}]")


#: a dollar sign just outside a rendered formula (docs/hooks/pages.py wraps each in a `class="math"` element)
STRAY_DOLLAR = re.compile(r'\$\s*<(?:span|div) class="math">|</math></(?:span|div)>\s*\$')


def raw_math(page_html: str) -> list[str]:
    """The pieces of TeX in `page_html`'s visible text that were not turned into MathML, and dollar signs
    left around formulas that were."""
    stray = [m.group() for m in STRAY_DOLLAR.finditer(page_html)]
    parser = VisibleText()
    parser.feed(page_html)
    parser.close()
    text = "".join(parser.pieces)
    found = [m.group() for m in TEX_DELIMITED.finditer(text)]
    return stray + found + [m.group() for m in DOLLAR_MATH.finditer(text) if LOOKS_LIKE_TEX.search(m.group())]


def check(site: Path) -> list[str]:
    """Every problem in the built site at `site`, one line each."""
    problems = []
    for path in sorted(site.rglob("*.html")):
        page_html = path.read_text(encoding="utf-8")
        page = path.relative_to(site)
        problems += [f"{page}: loads from the network: {snippet[:160]!r}" for snippet in remote_requests(page_html)]
        problems += [f"{page}: math left as TeX: {tex[:160]!r}" for tex in raw_math(page_html)]
    for path in sorted(site.rglob("*.css")):
        for match in CSS_FETCH.finditer(path.read_text(encoding="utf-8")):
            problems.append(f"{path.relative_to(site)}: loads from the network: {match.group()!r}")
    return problems


def main(argv: list[str]) -> int:
    site = Path(argv[0] if argv else "build/site")
    if not (site / "index.html").is_file():
        print(f"{site} holds no built site (run mkdocs build first)", file=sys.stderr)
        return 2
    problems = check(site)
    print("\n".join(problems) or f"{site}: nothing loaded from the network, no raw TeX")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
