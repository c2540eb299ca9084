"""The family matrix (`mtdecode.testing.matrix`): every decoder-only family of the installed transformers, taken from
its own mappings, is either exact in every strategy (alone and batched, against the model's own plain forwards) or
refused before the first token with a one-line reason. Nothing crashes and nothing is silently wrong. The docs page
`docs/families.md` was written by the same code, and agrees with it for the transformers version it names.

The matrix can fail: with the adapter's window masks switched off, a family whose window matters decodes wrong
tokens, and the matrix says so.
"""

import re
from pathlib import Path

import pytest
import transformers

from mtdecode import model as adapter_module
from mtdecode.model import probe
from mtdecode.testing import matrix
from mtdecode.testing.families import decoder_only_families

pytestmark = pytest.mark.usefixtures("one_thread")

PAGE = Path(__file__).resolve().parent.parent / "docs" / "families.md"


def page_rows() -> tuple[str, dict[str, tuple[str, str]]]:
    """The transformers version the docs page was made with, and its bfloat16 cell and verdict per family."""
    text = PAGE.read_text()
    version = re.search(r"^transformers (\S+):", text, re.MULTILINE).group(1)
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) > 3 and cells[0] in decoder_only_families():
            rows[cells[0]] = (cells[-2], cells[-1])
    return version, rows


# the matrix asks what each family does to the strategies' tokens; their types are checked by the strategies' own
# tests and by the batch tests on three families, and checking them again here took over half of this file's time
@pytest.mark.usefixtures("unchecked")
@pytest.mark.parametrize("family", decoder_only_families())
def test_every_family_is_exact_in_every_strategy_or_refused_with_its_reason(family):
    """... and every family exact in float64 is exact up to ties in bfloat16: none is refused for rounding alone."""
    result = matrix.check_family(family, half=True)
    if result.refused is not None:
        assert not result.cells, "a refused family must be refused before anything is decoded"
        assert "\n" not in result.refused and result.refused.startswith(result.model_class), result.refused
    else:
        wrong = {name: cell for name, cell in result.cells.items() if cell != "exact"}
        assert not wrong, f"{family}: {wrong}"
        assert list(result.cells) == matrix.strategies_names()
        assert result.half == "exact up to ties", f"{family} in bfloat16: {result.half}"
    version, rows = page_rows()
    if version == transformers.__version__:  # the page describes this version: it must say the same
        half, shown = rows.get(family, ("", ""))
        assert shown.startswith(result.verdict.lower()), f"docs/families.md says {shown!r} for {family}"
        assert half == (result.half or "–"), f"docs/families.md says {half!r} in bfloat16 for {family}"


def test_the_page_counts_the_families_of_its_version():
    version, rows = page_rows()
    if version == transformers.__version__:
        assert sorted(rows) == decoder_only_families()
    assert len(rows) >= 100


def test_the_matrix_catches_a_window_that_is_not_applied(monkeypatch):
    """Negative control: the adapter without its sliding-window masks gives wrong tokens on a windowed family (its
    4-token window matters in the matrix's decodes). The probe refuses such an adapter at once; with the probe off
    too, the matrix reports mismatches instead of passing."""
    monkeypatch.setattr(adapter_module, "sliding_window", lambda config: None)
    refused = matrix.check_family("mistral", strategy_names=["autoregressive"])
    assert refused.refused is not None and "hidden columns with positions that skip them" in refused.refused
    assert matrix.check_half("mistral", strategy_names=["autoregressive"]).startswith("refused: ")
    monkeypatch.setattr(probe, "probe_custom_mask", lambda adapter: None)
    result = matrix.check_family("mistral", strategy_names=["autoregressive", "prompt_lookup"])
    assert result.refused is None and all(cell.startswith("mismatch") for cell in result.cells.values()), result
    half = matrix.check_half("mistral", strategy_names=["autoregressive", "prompt_lookup"])
    assert half.startswith("autoregressive parts from greedy") and "gap" in half, half


def test_the_matrix_reports_a_crash_as_a_crash(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("out of cheese")

    monkeypatch.setattr(matrix, "generate", broken)
    result = matrix.check_family("llama", strategy_names=["jacobi"])
    assert result.cells["jacobi"].startswith("crashed: RuntimeError: out of cheese")
