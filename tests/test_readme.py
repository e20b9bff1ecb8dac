"""The README's generated sections (routes, env vars, performance) match the code and committed results."""
from pathlib import Path

from numba_nbits.readme import render

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_generated_sections_up_to_date():
    text = README.read_text()
    assert render(text) == text, "README.md is out of date: run `python -m numba_nbits.readme`"


def test_readme_has_setup_quickstart_and_demo():
    text = README.read_text()
    for needle in ("pip install -e", "python -m pytest", "python -m numba_nbits", "## Quick start", "## Routes",
                   "## Configuration", "## Performance"):
        assert needle in text
