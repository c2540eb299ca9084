"""The teacher's deck (`make slides`, tutorials/slides.py): every section the 90-minute plan names exists in its
notebook, each becomes slides, and the page loads nothing from the network."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("course_slides", ROOT / "tutorials" / "slides.py")
slides = importlib.util.module_from_spec(spec)
spec.loader.exec_module(slides)


def test_the_deck_shows_every_planned_section_and_needs_no_network():
    page = slides.deck("reveal.js", executed=False)  # the sources: this test does not depend on executed notebooks
    for block in slides.PLAN:
        assert block.title in page
        for title in block.sections:
            assert f"<h2>{title}</h2>".replace('"', "&quot;") in page or f"<h2>{title}</h2>" in page
    addresses = re.findall(r'(?:src|href)="([^"]+)"', page)
    assert addresses and all(not a.startswith(("http:", "https:", "//")) for a in addresses), addresses
    assert all(a.startswith(("reveal.js/", "data:")) for a in addresses)
    assert page.count("<section>") > 4 * len(slides.PLAN)


def test_a_plan_that_names_a_missing_section_fails():
    block = slides.Block("0-5", "nothing", "01_first_decode", ("A section that is not there",))
    with pytest.raises(ValueError, match="no section '## A section that is not there'"):
        slides.slides_of(block, executed=False)
