"""The hand-written pages render as written: the star of ℓ* never pairs with another into italics,
and maths goes through the site's maths extension instead of showing as raw text."""

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
# the site's own pages (the generated experiment pages under docs/experiments/ come from these and
# from the experiments' hand-written readings, experiments/NAME.md)
PAGES = sorted(ROOT.glob("docs/*.md")) + sorted(ROOT.glob("experiments/*.md"))
FENCE = re.compile(r"^\s*```.*?^\s*```", re.MULTILINE | re.DOTALL)
LITERAL = re.compile(r"`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]+\$", re.DOTALL)  # code spans and maths: no emphasis there
STAR = re.compile(r"(?<!\\)\*")
UNESCAPED_ELL_STAR = re.compile(r"ℓ(?<!\\)\*")
RAW_POWER = re.compile(r"[\wℓα)]\^[(−\-\d½]")  # ℓ^(−α), ℓ^−3: a power typed as text


def prose_paragraphs(text: str) -> list[str]:
    """The page's paragraphs with code blocks, code spans and maths taken out."""
    return [LITERAL.sub(" ", paragraph) for paragraph in re.split(r"\n\s*\n", FENCE.sub("\n\n", text))]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_no_unescaped_star_of_ell_star_shares_a_paragraph_with_another_star(page):
    for paragraph in prose_paragraphs(page.read_text()):
        for found in UNESCAPED_ELL_STAR.finditer(paragraph):
            others = [star for star in STAR.finditer(paragraph) if star.start() != found.end() - 1]
            assert not others, f"{page.name}: 'ℓ*' beside another '*' turns text italic; write ℓ\\*:\n{paragraph}"


def test_the_check_finds_what_it_guards_against():
    assert not prose_paragraphs("toward ℓ\\* = 128 with *emphasis*")[0].count("ℓ*")
    [paragraph] = prose_paragraphs("toward ℓ* = 128 with *emphasis*")
    assert UNESCAPED_ELL_STAR.search(paragraph) and len(STAR.findall(paragraph)) == 3
    assert prose_paragraphs("`ℓ*` and $\\ell^*$ with **bold**")[0].count("*") == 4  # code and maths gone
    assert RAW_POWER.search("L ∝ ℓ^(−α_ℓ)") and RAW_POWER.search("MSE ∝ ℓ^−3")
    assert not RAW_POWER.search(" ".join(prose_paragraphs("$L \\propto \\ell^{-\\alpha_\\ell}$")))


def test_the_site_renders_maths_through_arithmatex_and_mathjax():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    extensions = {
        next(iter(entry)) if isinstance(entry, dict) else entry: entry for entry in config["markdown_extensions"]
    }
    assert extensions["pymdownx.arithmatex"] == {"pymdownx.arithmatex": {"generic": True}}
    local = [script for script in config["extra_javascript"] if not script.startswith("http")]
    assert local and all((ROOT / config["docs_dir"] / script).is_file() for script in local)
    assert "arithmatex" in (ROOT / config["docs_dir"] / local[0]).read_text()


@pytest.mark.parametrize("page", sorted(ROOT.glob("docs/*.md")), ids=lambda page: page.name)
def test_the_hand_written_docs_type_no_power_as_raw_text(page):
    raw = [paragraph for paragraph in prose_paragraphs(page.read_text()) if RAW_POWER.search(paragraph)]
    assert not raw, f"{page.name}: write maths as $…$ (pymdownx.arithmatex):\n" + "\n\n".join(raw)
