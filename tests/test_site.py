"""The docs site's build steps (docs/hooks/pages.py) and its check (docs/check_site.py), on small samples.

The site itself is built after the tests by `make test` (`mkdocs build --strict`), and then checked whole
by `docs/check_site.py`: nothing loaded from the network, no TeX left unrendered.
"""

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]


def load(path: Path):
    """The module at `path` (the docs' scripts are not a package)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


pages = load(ROOT / "docs" / "hooks" / "pages.py")
check_site = load(ROOT / "docs" / "check_site.py")


def notebook_markdown(source: str) -> str:
    """A notebook Markdown cell as nbconvert renders it, with the hook's math marks, then the hook's MathML."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    pages.mark_notebook_math()
    return pages.render_math(markdown2html_mistune(source))


# ---- math ----------------------------------------------------------------------------------------


def test_inline_and_display_math_become_mathml():
    page = (
        '<p>Keep <span class="arithmatex">\\(y_{i} &lt; 2\\)</span>.</p>\n'
        '<div class="arithmatex">\\[\n\\sum_i p(x_i) \\le 1\n\\]</div>'
    )
    html = pages.render_math(page)
    assert '<span class="math"><math xmlns="http://www.w3.org/1998/Math/MathML" display="inline">' in html
    assert '<div class="math"><math xmlns="http://www.w3.org/1998/Math/MathML" display="block">' in html
    assert "<mo>&#x0003C;</mo>" in html  # the escaped < came back as a less-than sign, not as text "&lt;"
    assert "arithmatex" not in html and "\\(" not in html and "\\[" not in html


def test_an_unknown_tex_command_fails_instead_of_showing_as_text():
    with pytest.raises(ValueError, match=r"\\foo"):
        pages.render_math('<span class="arithmatex">\\(\\foo{x}\\)</span>')


def test_notebook_math_is_rendered_and_dollars_in_code_and_escaped_ones_are_left():
    html = notebook_markdown(
        "Greedy: $y_i = \\operatorname{argmax}_y p(y)$, and\n\n$$\\sum_y p(y) = 1$$\n\n"
        "It costs \\$5 and \\$10. In code: `$HOME/$x_1$`."
    )
    assert html.count('display="inline"') == 1 and html.count('display="block"') == 1
    assert "<mo>argmax</mo>" in html
    assert "It costs $5 and $10." in html  # escaped dollars are prices, not math
    assert "<code>$HOME/$x_1$</code>" in html  # code is never math
    assert check_site.raw_math(html) == []


def test_math_in_the_table_of_contents_becomes_mathml():
    # mkdocs-jupyter takes a notebook's headings from its Markdown source, math and all
    entry = SimpleNamespace(title="Why $\\Pr(E) = 1$", children=[SimpleNamespace(title="At $\\tau$", children=[])])
    pages.render_toc_math([entry])
    assert entry.title.startswith("Why <math") and "<mo movablelimits=\"true\">Pr</mo>" in entry.title
    assert entry.children[0].title.startswith("At <math") and "$" not in entry.children[0].title
    assert pages.render_title_math("It costs \\$5 and \\$10") == "It costs \\$5 and \\$10"


def test_an_unmarked_notebook_renderer_would_leave_the_tex():
    # what the check catches: nbconvert's own renderer writes the math back as text
    from nbconvert.filters.markdown_mistune import IPythonRenderer, MarkdownWithMath

    plain = IPythonRenderer(escape=False)
    plain.inline_math = lambda body: f"${body}$"  # nbconvert's behaviour without the hook
    html = MarkdownWithMath(renderer=plain).render("Greedy: $y_{i-1}$ here.")
    assert check_site.raw_math(html) == ["$y_{i-1}$"]


# ---- notebook pages ------------------------------------------------------------------------------

NOTEBOOK = """
<script src=""> </script>
<script type="text/x-mathjax-config">init_mathjax = function() {}</script>
<script type="module">const mermaid = (await import("https://cdn.example/mermaid.mjs")).default;</script>
<script>document.addEventListener('clipboard-copy', function(event) {})</script>
<div class="jp-Cell jp-MarkdownCell jp-Notebook-cell"><p>Exercise 1.</p></div>
<div class="jp-Cell jp-CodeCell jp-Notebook-cell celltag_solution">
<div class="jp-Cell jp-CodeCell jp-Notebook-cell celltag_solution" id="cell-id=a1">
<div class="jp-Cell-inputWrapper"><pre>answer = 4</pre></div>
<div class="jp-Cell-outputWrapper"><div class="jp-OutputArea"><pre>4</pre></div></div>
</div>
</div>
<div class="jp-Cell jp-CodeCell jp-Notebook-cell celltag_check">
<div class="jp-Cell jp-CodeCell jp-Notebook-cell celltag_check" id="cell-id=a2"><pre>check(answer)</pre></div>
</div>
"""


def test_remote_scripts_and_mathjax_go_and_local_ones_stay():
    html = pages.remove_remote_scripts(NOTEBOOK)
    assert "mathjax" not in html.lower() and "cdn.example" not in html and 'src=""' not in html
    assert "clipboard-copy" in html
    assert check_site.remote_requests(NOTEBOOK) and not check_site.remote_requests(html)


def test_a_solution_cell_is_folded_whole_and_a_check_cell_stays_open():
    html = pages.fold_solutions(NOTEBOOK)
    folded = html[html.index('<details class="solution">') : html.index("</details>")]
    assert folded.startswith('<details class="solution"><summary>Solution</summary>')
    assert "answer = 4" in folded and "<pre>4</pre>" in folded  # input and output
    assert "celltag_check" not in folded and html.count("<details") == 1
    assert folded.count("<div") == folded.count("</div>")  # the cell's own divs, all closed inside


def test_a_cell_that_is_never_closed_is_an_error():
    with pytest.raises(ValueError, match="never closed"):
        pages.fold_solutions('<div class="jp-Cell celltag_solution"><div>answer</div>')


def test_code_cells_and_source_listings_are_left_out_of_search():
    html = pages.exclude_code_from_search(NOTEBOOK + '<details class="mkdocstrings-source"><pre>def f(): ...</pre>')
    assert html.count("<div data-search-exclude ") == 4  # both wrappers of both code cells
    assert '<details class="mkdocstrings-source" data-search-exclude>' in html
    assert '<div data-search-exclude class="jp-Cell jp-MarkdownCell' not in html


# ---- figures -------------------------------------------------------------------------------------


def test_a_picture_with_a_dark_twin_is_shown_per_scheme():
    page = '<p><img alt="mask" src="../../img/causal.png" /> <img alt="other" src="../../img/tree.png" /></p>'
    html = pages.pair_dark_figures(page, "concepts/masks/", lambda path: path == "img/dark/causal.png")
    assert '<img alt="mask" src="../../img/causal.png#only-light" />' in html
    assert '<img alt="mask" src="../../img/dark/causal.png#only-dark" />' in html
    assert '<img alt="other" src="../../img/tree.png" />' in html  # no twin: left as it was


# ---- the site check ------------------------------------------------------------------------------


def test_the_check_finds_what_a_browser_would_fetch_and_leaves_links():
    fetched = [
        '<script src="https://cdn.example/mathjax.js"></script>',
        '<link rel="stylesheet" href="//fonts.example/css">',
        '<img src="http://example.com/a.png">',
        "<style>@import url(https://fonts.example/x.css);</style>",
    ]
    for html in fetched:
        assert check_site.remote_requests(html), html
    local = '<a href="https://arxiv.org/abs/2211.17192">paper</a><link rel="canonical" href="https://x.example/">'
    local += '<script src="../assets/bundle.js"></script><img src="../img/causal.png">'
    assert check_site.remote_requests(local) == []


def test_the_check_finds_raw_tex_in_prose_only():
    assert check_site.raw_math("<p>the rule $y_{i-1}$ and \\(x\\)</p>") == ["\\(x\\)", "$y_{i-1}$"]
    assert check_site.raw_math("<p>the step \\[a\\] and \\begin{align}</p>") == ["\\[a\\]", "\\begin{align}"]
    # `$$...$$` inside a paragraph: Markdown reads `$` + inline math + `$`
    inline_display = '<p>is $<span class="math"><math><mi>x</mi></math></span>$.</p>'
    assert check_site.raw_math(inline_display) == ['$<span class="math">', "</math></span>$"]
    prose_only = (
        "<p>It costs $5 and $10.</p><pre>echo $x_1$</pre><code>$y_{i}$</code>"
        '<div class="clipboard-copy-txt">s = "$a_b$"</div><math><mi>$x^2$</mi></math>'
    )
    assert check_site.raw_math(prose_only) == []


# ---- packaging -----------------------------------------------------------------------------------


def test_the_wheel_holds_every_file_of_the_package(tmp_path):
    """Every file under mtdecode/ (weights, prompts, anything read at run time) is in a built wheel."""
    source = tmp_path / "source"  # a copy, so that the build leaves nothing in the working tree
    shutil.copytree(ROOT / "mtdecode", source / "mtdecode", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md", "pytest_mtdecode.py"):
        shutil.copy(ROOT / name, source / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), "."],
        cwd=source, check=True, capture_output=True,
    )
    (wheel,) = tmp_path.glob("mtdecode-*.whl")
    shipped = set(zipfile.ZipFile(wheel).namelist())
    package = {
        path.relative_to(source).as_posix() for path in (source / "mtdecode").rglob("*") if path.is_file()
    }
    assert package - shipped == set()
    assert {"mtdecode/bench/prompts.json", "pytest_mtdecode.py"} <= shipped
