"""The docs cannot drift from the data: the generated results pages equal what the committed runs
give, every number the README and the Results page quote is the runs', every experiment page is in
the site's navigation, every link resolves, and the site builds with warnings as errors."""

import functools
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner

from toymodels.api import fit_run, load_fits
from toymodels.cli import main
from toymodels.pages.experiment_page import experiment_page
from toymodels.pages.results import ExperimentResult, committed_results
from toymodels.pages.site import stale_files
from toymodels.pages.summary import HEADLINE, by_importance, findings, summary_points, summary_table
from toymodels.plotting.summary import plot_summary
from toymodels.registry import parse_call
from toymodels.results.depth_fit import DepthFit
from toymodels.results.report import crossing_values, midway_slope, parameter_map
from toymodels.results.storage import RunFolder
from toymodels.workflows.certificates import DOUBLING_MARGIN

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "figures"
RESULTS_PAGE = ROOT / "docs" / "experiments" / "index.md"  # the verdict, the full table and the reading behind it


def words(path: Path) -> str:
    """A page's text with its line breaks and runs of spaces as single spaces, to find a quote in."""
    return " ".join(path.read_text().split())


@pytest.fixture(scope="module")
def results():
    return committed_results(RESULTS)


def test_the_committed_pages_and_readme_summary_are_what_the_runs_give(results, monkeypatch):
    monkeypatch.chdir(ROOT)  # the pages name the notes and data by their repository paths
    assert stale_files(results) == []


def test_a_changed_fit_makes_its_page_and_the_summary_stale(results, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    shutil.copytree(RESULTS / "regimes", tmp_path / "regimes", ignore=shutil.ignore_patterns("*.pdf", "*.png"))
    fit_json = tmp_path / "regimes" / "cpu" / "fit.json"
    document = json.loads(fit_json.read_text())
    document["fits"][1]["alpha"] += 0.5
    fit_json.write_text(json.dumps(document))
    changed = ExperimentResult.load("regimes", "cpu", tmp_path)
    others = [result for result in results if result.experiment.name != "regimes"]
    stale = stale_files(sorted([*others, changed], key=lambda result: result.experiment.name))
    assert sorted(path.as_posix() for path in stale) == [
        "docs/experiments/index.md",
        "docs/experiments/regimes.md",
        "docs/index.md",
    ]  # regimes is not a README headline


def test_a_page_shows_the_runs_own_numbers_and_its_reading(results):
    regimes = next(result for result in results if result.experiment.name == "regimes")
    page = experiment_page(regimes)
    tied = next(fit for fit in regimes.fits if fit.teacher == "tied")
    assert f"| {tied.alpha:.2f} | [{tied.alpha_low:.2f}, {tied.alpha_high:.2f}] |" in page
    assert regimes.experiment.claim in page and "fit window: ℓ ≥ 4" in page
    assert "## Reading it" in page  # experiments/regimes.md, appended
    for file in regimes.figure_files():
        assert f"(../figures/regimes/cpu/{file})" in page


def test_beside_the_fit_a_page_gives_the_untrained_discretisation_the_mismatch_alpha_and_the_paper(results):
    fig5 = next(result for result in results if result.experiment.name == "fig5")
    page = experiment_page(fig5).split("### Beside the untrained discretisation and the paper")[1]
    for fit in fig5.fits:
        row = next(line for line in page.splitlines() if line.startswith(f"| {fit.teacher} |"))
        ratios = [reference / loss for reference, loss in zip(fit.reference_losses, fit.losses)]
        assert f"| {fit.reference_losses[0]:.3e} |" in row and f"| {fit.reference_alpha:.2f} |" in row
        assert f"| {min(ratios):.3g}–{max(ratios):.3g} |" in row
        assert f"| {fit.mismatch_alpha:.2f} [{fit.mismatch_alpha_low:.2f}, {fit.mismatch_alpha_high:.2f}] |" in row
        assert row.endswith(f"| ≈ {fig5.experiment.claimed_alpha[fit.teacher]:g} |")


def test_the_correlation_pages_local_slopes_are_what_fit_gives_on_the_runs_metrics(results):
    """The α-against-ρ table (a row per ρ, a local slope per depth window) is the run's own fit."""
    correlation = next(result for result in results if result.experiment.name == "correlation")
    page = experiment_page(correlation)
    for fit in fit_run(correlation.folder):  # refitted from metrics.csv over the run's own window
        row = next(line for line in page.splitlines() if line.startswith(f"| {fit.teacher} |"))
        assert f"| {', '.join(f'{slope:.2f}' for slope in fit.local_slopes)} |" in row
        assert f"| {fit.alpha:.2f} | [{fit.alpha_low:.2f}, {fit.alpha_high:.2f}] |" in row


def test_the_rho_map_on_crossover_highs_page_is_each_crossover_runs_own_fit(results):
    """The α-against-ρ table of the whole map (crossover_high drawn with low and mid): each row is
    its experiment's fit, refitted from that run's metrics."""
    high = next(result for result in results if result.experiment.name == "crossover_high")
    table = experiment_page(high).split("## The numbers of alpha_vs_rho")[1].split("## Certificate")[0]
    for name in ("crossover_low", "crossover_mid", "crossover_high"):
        for fit in fit_run(RESULTS / name / "cpu"):
            rho = parse_call("teacher", fit.teacher)[1]["rho"]
            row = next(line for line in table.splitlines() if line.startswith(f"| {rho:g} |"))
            assert f"| {fit.alpha:.2f} [{fit.alpha_low:.2f}, {fit.alpha_high:.2f}] | yes |" in row
            assert row.endswith(" | ".join(f"{slope:.2f}" for slope in fit.local_slopes) + " |")


def test_the_reading_of_the_crossover_quotes_the_committed_runs_crossings_and_slopes(results):
    """The Results page's reading of the ρ crossover quotes the crossings and deep slopes the runs give."""
    fits = {result.experiment.name: result.fits for result in results}
    readme = words(RESULTS_PAGE)

    def crossings(*names):
        table = parameter_map([fit for name in names for fit in fits[name]], "rho")
        return list(crossing_values(table, "rho", midway_slope(1)).values())

    over_4_32 = crossings("crossover_low", "crossover_mid", "crossover_high")
    assert [crossing.bound for crossing in over_4_32] == ["at"] * 3
    assert (
        "moves up as depth doubles: about {:.2f} (ℓ 4→8), {:.2f} (8→16), {:.2f} (16→32).".format(
            *(crossing.value for crossing in over_4_32)
        )
    ) in readme
    deep = crossings("crossover_deep", "crossover_deep_98")[-1]  # the ℓ 32→64 window
    (rho_95,), (rho_98,) = fits["crossover_deep"], fits["crossover_deep_98"]
    assert f"slope falls to {rho_95.local_slopes[-1]:.2f} over ℓ 32→64" in readme
    assert f"reaches {rho_98.local_slopes[-1]:.2f} there, so that window's midpoint is near {deep.value:.2f}" in readme
    assert deep.bound == "at"


def test_the_summary_has_a_line_per_experiment_and_marks_lower_bounds(results):
    table = summary_table(results).splitlines()
    assert len(table) == 2 + len(results)
    uncertified = results[0].fits[0].__class__(**{**vars(results[0].fits[0]), "certified": False})
    lower = ExperimentResult(results[0].experiment, "cpu", results[0].folder, results[0].protocol, [uncertified])
    assert "no: lower bounds" in summary_table([lower])
    assert summary_points([lower]) == []  # the figure shows the headline experiments' fits only


def test_the_summary_figure_shows_the_headline_rows_each_as_what_it_is(results):
    points = summary_points(results)
    rows = [
        (result, fit) for result in by_importance(results) if result.experiment.name in HEADLINE for fit in result.fits
    ]
    assert len(points) == len(rows) > 0
    for point, (result, fit) in zip(points, rows):
        assert (point.experiment, point.teacher, point.alpha) == (result.experiment.name, fit.teacher, fit.alpha)
        assert point.certified == result.fit_certified(fit) and point.withdrawn == (fit.group in result.withdrawn)
    assert any(point.withdrawn and not point.certified for point in points)  # paper_depths' withdrawn certificates


def test_the_summary_figure_is_drawn(results, tmp_path):
    paths = plot_summary(summary_points(results), "caption", tmp_path / "summary")
    assert [path.suffix for path in paths] == [".png", ".pdf"] and all(path.stat().st_size > 0 for path in paths)


def test_docs_check_exits_1_on_a_stale_page_of_the_repository_it_is_given(tmp_path, monkeypatch):
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs", symlinks=True, ignore=shutil.ignore_patterns("figures"))
    shutil.copy(ROOT / "README.md", copy / "README.md")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")  # its navigation is generated too
    monkeypatch.chdir(tmp_path)  # not the repository: --root names it
    assert (
        CliRunner().invoke(main, ["docs", "--check", "--reference", str(RESULTS), "--root", str(copy)]).exit_code == 0
    )
    page = copy / "docs" / "experiments" / "rk2.md"
    page.write_text(page.read_text().replace("3.63", "3.00"))
    result = CliRunner().invoke(main, ["docs", "--check", "--reference", str(RESULTS), "--root", str(copy)])
    assert result.exit_code == 1 and "rk2.md differs" in result.output


MARKDOWN_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _markdown_files():
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "experiments").glob("*.md"))]


@pytest.mark.parametrize("path", _markdown_files(), ids=lambda path: path.relative_to(ROOT).as_posix())
def test_every_link_to_a_file_of_the_repository_resolves(path):
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)  # code blocks hold no links
    for target in MARKDOWN_LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        assert (path.parent / target.split("#")[0]).exists(), f"{path.name} links to {target}, which is not there"


@pytest.mark.slow
def test_the_docs_site_builds_with_warnings_as_errors(tmp_path):
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "site" / "experiments" / "regimes" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "index.html").is_file()


INTERVAL = re.compile(r"(-?\d+\.\d\d) \[(-?\d+\.\d\d), (-?\d+\.\d\d)\]")  # an α quoted with its interval


def quoted_intervals(text: str) -> list[tuple[str, str, str]]:
    """The 'α [low, high]' triples a hand-written text quotes, outside code blocks (a command's
    output) and the generated summary."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"<!-- (summary|headline).*?<!-- end of \1 -->", "", text, flags=re.S)
    return INTERVAL.findall(text)


def test_every_alpha_the_prose_quotes_with_its_interval_is_a_committed_runs_fit_or_ladder_number(results):
    committed = set()
    for fit in (fit for result in results for fit in result.fits):
        committed.add((f"{fit.alpha:.2f}", f"{fit.alpha_low:.2f}", f"{fit.alpha_high:.2f}"))
        if fit.mismatch_alpha is not None:
            committed.add(
                (f"{fit.mismatch_alpha:.2f}", f"{fit.mismatch_alpha_low:.2f}", f"{fit.mismatch_alpha_high:.2f}")
            )
    for ladder in RESULTS.glob(f"*/cpu/{RunFolder.LADDER}"):  # a budget ladder's exponents and ratios r
        exponents = pd.read_csv(ladder / "ladder_exponents.csv")
        for measure in ("alpha", "p", "discretisation_slope"):
            for row in exponents.dropna(subset=[measure]).itertuples():
                committed.add(
                    tuple(f"{getattr(row, measure + end):.2f}".replace("-", "−") for end in ("", "_low", "_high"))
                )
        if (ladder / "ladder_tails.csv").is_file():
            for row in pd.read_csv(ladder / "ladder_tails.csv").dropna(subset=["low"]).itertuples():
                committed.add(tuple(f"{value:.2f}".replace("-", "−") for value in (row.value, row.low, row.high)))
        if (ladder / "ladder_ratios.csv").is_file():
            for row in pd.read_csv(ladder / "ladder_ratios.csv").itertuples():
                for measure in ("ratio", "p"):
                    committed.add(tuple(f"{getattr(row, measure + end):.2f}" for end in ("", "_low", "_high")))
        table = pd.read_csv(ladder / "ladder.csv")
        for ratio in [column for column in table if column == "r" or re.fullmatch(r"r_x\d+", column)]:
            for row in table.dropna(subset=[ratio]).itertuples():
                committed.add(tuple(f"{getattr(row, ratio + end):.2f}" for end in ("", "_low", "_high")))
    texts = [
        ROOT / "README.md",
        RESULTS_PAGE,
        *sorted((ROOT / "experiments").glob("*.md")),
        *sorted((ROOT / "docs").glob("*.md")),
    ]
    quoted = {(path.name, triple) for path in texts for triple in quoted_intervals(path.read_text())}
    assert len(quoted) >= 5  # the README and the readings quote them
    assert [(name, triple) for name, triple in sorted(quoted) if triple not in committed] == []


@pytest.mark.parametrize(
    "fit_json", sorted(RESULTS.glob("**/fit.json")), ids=lambda path: str(path.parent.relative_to(RESULTS))
)
def test_every_committed_runs_table_agrees_with_its_fit_json(fit_json):
    document = json.loads(fit_json.read_text())
    table = load_fits(fit_json.parent)
    assert len(table) == len(document["fits"])
    for row, fit in zip(table.itertuples(), map(DepthFit.from_dict, document["fits"])):
        assert (row.teacher, row.certified, row.regime) == (fit.teacher, fit.certified, fit.regime)
        assert (row.fit_min_depth, row.depths) == (document["window"]["min_depth"], " ".join(map(str, fit.depths)))
        assert min(fit.depths) >= row.fit_min_depth
        assert [row.alpha, row.alpha_low, row.alpha_high] == pytest.approx(
            [fit.alpha, fit.alpha_low, fit.alpha_high], rel=1e-12, nan_ok=True
        )
    assert not (fit_json.parent / "summary.csv").exists()  # the file that once disagreed is gone


def test_the_findings_count_every_committed_fit_and_keep_lower_bounds_apart(results):
    text = findings(results)
    assert f"({sum(len(result.fits) for result in results)} fits in {len(results)} experiments" in text
    tied = next(line for line in text.splitlines() if line.startswith("- **tied teacher, Euler students:**"))
    certified = [
        fit.alpha
        for result in results
        for fit in result.fits
        if fit.teacher == "tied"
        and result.fit_certified(fit)
        and result.protocol.config.student == "euler"
        and result.protocol.config.teacher_depth == 128
    ]
    assert f"{len(certified)} certified fits" in tied and f"α {min(certified):.2f}–{max(certified):.2f}" in tied
    assert "lower bound" in tied  # the uncertified and the withdrawn fits are counted apart, never in the range


@functools.cache
def verdict_table_output() -> str:
    """What findings/verdict_table.py prints on the committed runs."""
    return subprocess.run(
        [sys.executable, str(ROOT / "findings" / "verdict_table.py"), str(RESULTS)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def verdict_table() -> dict[str, tuple[str, list[str]]]:
    """Per kind of student of the verdict table over ℓ 6–48: α and its local slopes as printed."""
    rows = re.findall(r"^(.+?)\s+ℓ 6–48: α (\S+) \[.*local slopes (.+)$", verdict_table_output(), re.M)
    return {kind: (alpha, slopes.split(", ")) for kind, alpha, slopes in rows}


def listed(values: list[str]) -> str:
    *first, last = values
    return f"{', '.join(first)} and {last}"


def moved_beyond_noise(name: str) -> pd.DataFrame:
    """The students of a run's budget certificate that twice the budget moved beyond their test set's
    noise + DOUBLING_MARGIN, from its committed budget_doubling.csv."""
    budget = pd.read_csv(RESULTS / name / "cpu" / "budget_doubling.csv")
    beyond = budget.move.abs() > budget.relative_noise + DOUBLING_MARGIN
    assert (beyond == ~budget.budget_certified).all()  # the certificate's own reading of its margin
    return budget.assign(beyond=beyond)


def test_the_readme_finding_quotes_the_joined_runs_and_says_what_makes_them_lower_bounds():
    """The finding's tied and independent α are the joined final runs' fits; its counts of students
    that twice the budget moved beyond the noise + 5 % and its α before and after are their budget
    certificates'."""
    readme, page = words(ROOT / "README.md"), words(RESULTS_PAGE)
    for teacher, text in (("tied", page), ("independent", readme)):  # the README's tied line is the ladder's
        name = f"paper_depths_final_{teacher}"
        fit = json.loads((RESULTS / name / "cpu" / "fit.json").read_text())["fits"][0]
        assert f"{fit['alpha']:.2f} [{fit['alpha_low']:.2f}, {fit['alpha_high']:.2f}]" in text
        assert not fit.get("certified", fit.get("converged"))  # quoted as a lower bound
        budget = moved_beyond_noise(name)
        assert f"{budget.beyond.sum()} of the {len(budget)} students beyond the" in text
    tied = moved_beyond_noise("paper_depths_final_tied")
    assert f"raised α from {tied.alpha_polished[0]:.2f} to {tied.alpha_doubled[0]:.2f}" in page
    independent = moved_beyond_noise("paper_depths_final_independent")
    assert f"by at most {-100 * independent.move[independent.beyond].min():.0f} %" in readme
    assert f"noise + {DOUBLING_MARGIN:.0%}".replace("%", " %") in readme


def test_the_readme_finding_gives_the_shallow_windows_independent_range_and_why_teacher24_and_rk2_do_not_count(results):
    """The independent teacher's certified Euler α over windows that stop short of ℓ 32 (its teacher of
    the paper's depth 128), and teacher24's step-mismatch α, are the committed runs'."""
    readme = words(ROOT / "README.md")
    shallow = [
        (fit.alpha, max(fit.depths))
        for result in results
        for fit in result.fits
        if fit.teacher == "independent"
        and result.fit_certified(fit)
        and max(fit.depths) < 32
        and result.protocol.config.student == "euler"
        and result.protocol.config.teacher_depth == 128
    ]
    alphas, ends = zip(*shallow)
    assert (
        f"over windows that end at ℓ {min(ends)}{f'–{max(ends)}' if max(ends) > min(ends) else ''} "
        f"its certified students give {min(alphas):.2f}–{max(alphas):.2f}"
    ) in readme
    assert f"{min(alphas):.2f}–{max(alphas):.2f} at every temperature" in words(RESULTS_PAGE)
    fits = {(result.experiment.name, fit.teacher): fit for result in results for fit in result.fits}
    teacher24, rk2 = fits["teacher24", "tied"], fits["rk2", "tied"]
    assert f"teacher24's {teacher24.alpha:.2f} [{teacher24.alpha_low:.2f}, {teacher24.alpha_high:.2f}]" in readme
    assert f"1/ℓ − 1/24 they give {teacher24.mismatch_alpha:.2f}" in readme
    assert f"rk2's {rk2.alpha:.2f} [{rk2.alpha_low:.2f}, {rk2.alpha_high:.2f}]" in readme


def test_the_readme_is_short_and_its_finding_fits_in_five_lines():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200
    finding = readme.split("<!-- --8<-- [start:verdict] -->")[1].split("<!-- --8<-- [end:verdict] -->")[0]
    assert len([line for line in finding.splitlines() if line.strip() and not line.strip().startswith("<!--")]) <= 5
    table = readme.split("<!-- headline")[1].split("<!-- end of headline -->")[0]
    assert len([line for line in table.splitlines() if line.startswith("| [")]) == len(HEADLINE) <= 8


def test_the_readings_numbers_are_what_the_verdict_table_gives_on_the_committed_runs():
    """The paper's loop over its six depths, fitted across paper_budget and paper_budget_deep by
    findings/verdict_table.py, is quoted as the script prints it; so are every tied teacher's α on
    the final protocol, the range over them all, and which kinds' local slope falls at the deep end."""
    kinds = verdict_table()
    page = words(RESULTS_PAGE)
    low, high = re.search(r"^paper loop 80k .*?α \S+ \[(\S+), (\S+)\]", verdict_table_output(), re.M).groups()
    alpha, slopes = kinds["paper loop 80k"]
    assert f"gives α {alpha} over the six depths" in page and f"regression interval {low}–{high}" in page
    assert f"local slopes {listed(slopes)}; none of its students flattened" in page
    for teacher, then in ((2, "; on its third"), (3, ". Joined over the three teachers")):
        alphas = [kinds[f"{kind}, teacher {teacher}"][0] for kind in ("certified", "polished", "doubled")]
        assert f"α {alphas[0]} certified, {alphas[1]} polished and {alphas[2]} doubled{then}" in page
    trained = [float(alpha) for kind, (alpha, _) in kinds.items() if not kind.startswith("paper loop 40k")]
    assert f"gives the tied teacher α between {min(trained):.2f} and {max(trained):.2f} over ℓ 6–48" in page
    joined = json.loads((RESULTS / "paper_depths_final_tied" / "cpu" / "fit.json").read_text())["fits"][0]
    budget = moved_beyond_noise("paper_depths_final_tied")
    assert (
        f"gives {joined['alpha']:.2f} [{joined['alpha_low']:.2f}, {joined['alpha_high']:.2f}], an interval that "
        f"holds 2 and not 3"
    ) in page
    assert (
        f"moved {budget.beyond.sum()} of the {len(budget)} students beyond the test set's noise + 5 % and raised "
        f"α from {budget.alpha_polished[0]:.2f} to {budget.alpha_doubled[0]:.2f}"
    ) in page


def test_which_local_slopes_fall_at_the_deep_end_is_what_the_committed_runs_give():
    """ "Falls at the deep end": the slope over ℓ 32→48 below the α of all six depths. The reading
    names the kinds where it falls and where it does not, with their slopes, as the runs give them."""
    kinds = verdict_table()
    falls = {kind: float(slopes[-1]) < float(alpha) for kind, (alpha, slopes) in kinds.items()}
    named_falling = ["doubled", "doubled, teacher 2", "doubled, teacher 3", "paper loop 80k"]
    named_not = ["certified", "certified, teacher 2", "polished", "polished, teacher 2"]
    assert all(falls[kind] for kind in named_falling) and not any(falls[kind] for kind in named_not)
    deep = {kind: slopes[-1] for kind, (_, slopes) in kinds.items()}
    page = words(RESULTS_PAGE)
    assert (
        f"falls below the fit's α for the doubled students of all three teachers and the paper's loop "
        f"({', '.join(deep[kind] for kind in named_falling[:3])}; {deep['paper loop 80k']})"
    ) in page
    assert (
        f"but not for the certified students of the first two teachers ({deep['certified']}, "
        f"{deep['certified, teacher 2']}) nor their polished ones ({deep['polished']}, "
        f"{deep['polished, teacher 2']})"
    ) in page
    independent = json.loads((RESULTS / "paper_depths_final_independent" / "cpu" / "fit.json").read_text())["fits"][0]
    slopes = [f"{slope:.2f}" for slope in independent["local_slopes"]]
    assert independent["local_slopes"][-1] >= independent["alpha"] - 0.2  # the independent ones do not fall
    assert f"the local slopes ({listed(slopes)} over the three) do not fall" in page


def test_every_committed_experiment_page_is_in_the_sites_navigation(results):
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())

    def pages(entries):
        for entry in entries:
            for value in entry.values() if isinstance(entry, dict) else [entry]:
                yield from pages(value) if isinstance(value, list) else [value]

    in_nav = set(pages(config["nav"]))
    assert (
        sorted(
            f"experiments/{result.experiment.name}.md"
            for result in results
            if f"experiments/{result.experiment.name}.md" not in in_nav
        )
        == []
    )
    assert "experiments/index.md" in in_nav


@pytest.mark.parametrize(
    "path",
    sorted(subprocess.run(["git", "ls-files", "*.json"], cwd=ROOT, capture_output=True, text=True).stdout.split()),
)
def test_every_committed_json_file_is_strict_json(path):
    def refuse(constant):
        raise ValueError(f"{path} holds {constant}, which strict JSON readers reject: write null")

    json.loads((ROOT / path).read_text(), parse_constant=refuse)


def test_a_joined_runs_cost_is_its_parts_summed_as_in_the_summary(results):
    """The joined run's page and the summary table give one wall time: its parts' summed, the part
    that predates provenance included."""
    table = summary_table(results)
    for result in results:
        if not result.experiment.joined_from:
            continue
        summed = next(line for line in table.splitlines() if line.startswith(f"| [{result.experiment.name}]"))
        minutes = re.search(r"\| (≈ )?(\d+) min \|", summed).group(2)
        cost = experiment_page(result).split("## Cost")[1]
        assert f"Its parts' runs, summed: {minutes} min" in cost
        assert all(f"[`{part}`]({part}.md)" in cost for part in result.experiment.joined_from)


def test_the_mission_commands_time_and_the_smoke_tests_name_agree_everywhere():
    """One figure for one fact: every page that times the mission command gives 242–281 s, and the
    smoke test is `--preset quick`, never the mission command."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    timed = [path.name for path in pages if "242–281 s" in words(path)]
    assert {"README.md", "index.md", "getting-started.md", "usage.md"} <= set(timed)
    for path in pages:
        text = words(path)
        assert "minute and a half" not in text, path.name
        if "smoke test of an install" in text:
            assert "--preset quick" in text, path.name


def test_the_readings_split_of_the_final_protocols_exponents_is_the_joined_runs_layer_errors():
    """The doubled students' output-error exponent, split into the local errors' and C's, as the
    joined runs' layer_errors/error_exponents.csv give it (even slots, through the linearised
    read-out: the committed splits predate the exact one); the parts add up."""
    readme = words(RESULTS_PAGE)
    split = {}
    for teacher in ("tied", "independent"):
        table = pd.read_csv(RESULTS / f"paper_depths_final_{teacher}" / "cpu" / "layer_errors" / "error_exponents.csv")
        split[teacher] = next(
            table[
                (table.start == "doubled")
                & (table.training == "trained")
                & (table.space == "readout_linearised")
                & (table.slots == "even")
            ].itertuples()
        )
    tied, independent = split["tied"], split["independent"]
    for parts in (tied, independent):
        assert parts.alpha_output_error == pytest.approx(parts.alpha_local_error_sum + parts.alpha_coherence, abs=1e-9)
    assert (
        f"the tied teacher's {tied.alpha_output_error:.2f} is {tied.alpha_local_error_sum:.2f} from local errors"
        in readme
    )
    assert abs(tied.alpha_coherence) < 0.1  # "almost nothing from C"
    assert (
        f"the independent teacher's {independent.alpha_output_error:.2f} is {independent.alpha_local_error_sum:.2f} "
        f"from local errors and {independent.alpha_coherence:.2f} from C falling"
    ) in readme


@pytest.mark.slow  # a fresh interpreter
def test_the_docs_generator_reads_experiments_without_importing_the_runner():
    """Generating pages reads experiment files and committed runs; it never trains, so the
    runner (the sweep, its jobs, the engine) stays unimported."""
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, toymodels.pages.site; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "toymodels.workflows.experiment" in loaded
    assert not {"toymodels.workflows.sweep", "toymodels.workflows.parallel", "toymodels.training.engine"} & set(loaded)


def test_the_paper_loops_falls_when_its_budget_doubles_are_the_two_runs():
    """paper_budget's reading quotes how far each depth fell from paper_loop's 40 000 steps to its own 80 000."""

    def final(name):
        metrics = pd.read_csv(RESULTS / name / "cpu" / "metrics.csv")
        return metrics[metrics.step == metrics.step.max()].groupby("depth").test_loss.mean()

    fall = 100 * (1 - final("paper_budget") / final("paper_loop"))
    reading = " ".join((ROOT / "experiments" / "paper_budget.md").read_text().split())
    assert (
        f"fall by {fall[12]:.0f} %, {fall[16]:.0f} % and {fall[24]:.0f} % at ℓ 12, 16 and 24 when the budget "
        f"doubles, and by {fall[6]:.1f} % at ℓ 6"
    ) in reading
    deep = " ".join((ROOT / "experiments" / "paper_budget_deep.md").read_text().split())
    assert f"against {fall[6]:.0f}–{fall[24]:.0f} % at ℓ 6–24" in deep


def ladder_tables(name: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    tables = RESULTS / name / "cpu" / "ladder"
    return (
        pd.read_csv(tables / "ladder.csv").set_index("depth"),
        pd.read_csv(tables / "ladder_exponents.csv").set_index(["rung", "window"]),
    )


def interval(row, name: str) -> str:
    return f"{row[name]:.2f} [{row[name + '_low']:.2f}, {row[name + '_high']:.2f}]".replace("-", "−")


TIED_BULLET_WORDS = 80
LADDER_WINDOW = "6–24"  # the depths every rung of ladder_tied_x16 trained


def tail_row(name: str, family: str, measure: str = "alpha") -> pd.Series:
    """A committed ladder's joined `family` row over LADDER_WINDOW (ladder_tails.csv)."""
    tails = pd.read_csv(RESULTS / name / "cpu" / "ladder" / "ladder_tails.csv", keep_default_na=False, na_values=[""])
    rows = tails[
        (tails.window == LADDER_WINDOW)
        & (tails.replicate == "joined")
        & (tails.measure == measure)
        & (tails.family == family)
    ]
    return rows.iloc[0]


def last_rung_ratios(name: str) -> pd.DataFrame:
    """Each teacher's L(12)/L(24) at a ladder's last rung (ladder_ratios.csv)."""
    ratios = pd.read_csv(RESULTS / name / "cpu" / "ladder" / "ladder_ratios.csv")
    return ratios[ratios.rung == ratios.rung.iloc[-1]]


def value_range(values, digits: int = 2) -> str:
    return f"{min(values):.{digits}f}–{max(values):.{digits}f}"


def pure_law_alpha(p: float, depths=(6, 12, 16, 24), teacher_depth: int = 128) -> float:
    """The log–log α a pure (1/ℓ − 1/ℓ*)^p law reads over `depths`."""
    log_depths = np.log(depths)
    return -np.polyfit(log_depths, p * np.log(1 / np.asarray(depths) - 1 / teacher_depth), 1)[0]


def tied_answer_problems(text: str) -> list[str]:
    """What in `text` (the README's tied bullet, or the ladder page's opening) is not the ladder's
    answer as its tables give it: the ×16 rung's α, the pure Euler law's reading, the power law's
    limit (quoted only as failing, as it does), and the Muon ladder's L(12)/L(24)."""
    row = ladder_tables("ladder_tied_x16")[1].loc[("x16", LADDER_WINDOW)]
    power = tail_row("ladder_tied_x16", "power law")
    span = tail_row("ladder_tied_x16", "span of the passing families")
    ratios = last_rung_ratios("ladder_tied_x16")
    expected = {
        "α at ×16": f"α {interval(row, 'alpha')} at the ×16 rung over ℓ {LADDER_WINDOW}",
        "the Euler law": f"Euler rule's law ({pure_law_alpha(2):.2f} there)",
        "the power law": f"power law, which fails, would give {power.value:.2f} [{power.low:.2f}, {power.high:.2f}]",
        "the ratio": f"At ×16 L(12)/L(24) reads {value_range(ratios.ratio)} (p {value_range(ratios.p)};",
    }
    problems = [f"{name}: {quote!r} not found" for name, quote in expected.items() if quote not in text]
    if not (isinstance(power.failure, str) and power.failure and span.failure == "no family passes"):
        problems.append("a family passes: the text says none fits")
    if not (ratios.rung == "x16").all() or (ratios.p >= 2.7).any():
        problems.append("the ratio is not the ×16 rung's, or it decides: the text calls it a bound")
    metrics = pd.read_csv(RESULTS / "ladder_tied_muon_half" / "cpu" / "metrics.csv")
    muon = metrics[metrics.step == metrics.step.max()].set_index("depth").test_loss
    adam = ladder_tables("ladder_tied_r0_x16")[0]
    if f"Muon at half the samples, {muon[12] / muon[24]:.2f}" not in text:
        problems.append("the Muon run's ratio is not quoted as its tables give it")
    below = muon[[12, 24]].to_numpy() < adam.loss_x16[[12, 24]].to_numpy()
    if not (2 * metrics.step.max() == adam.steps_x16[12] and below.all()):
        problems.append("the Muon run is not below Adam's ×16 rung in half its steps")
    return problems


def tied_bullet(readme: str) -> str:
    return next(line for line in readme.splitlines() if line.startswith("- **Tied teacher:"))


def test_the_readme_gives_the_tied_answer_in_at_most_80_words_from_the_tables():
    bullet = tied_bullet((ROOT / "README.md").read_text())
    assert len(bullet.split()) <= TIED_BULLET_WORDS
    assert tied_answer_problems(bullet) == []


def test_the_tied_answer_check_fails_on_a_long_bullet_or_a_number_off_the_tables():
    bullet = tied_bullet((ROOT / "README.md").read_text())
    assert len((bullet + " and more words" * 20).split()) > TIED_BULLET_WORDS
    alpha = interval(ladder_tables("ladder_tied_x16")[1].loc[("x16", LADDER_WINDOW)], "alpha")
    changed = bullet.replace(alpha, alpha.replace(alpha[:4], f"{float(alpha[:4]) + 0.01:.2f}", 1))
    assert changed != bullet and any(problem.startswith("α at ×16") for problem in tied_answer_problems(changed))


def test_the_ladder_page_opens_with_the_readmes_answer_and_reads_the_rungs_as_their_tables_give():
    """The joined ladder's reading opens with the answer the README gives; then every rung's α over
    the depths every rung trained, and the first teacher's ratios at ℓ 12 and 24, which drift."""
    reading = (ROOT / "experiments" / "ladder_tied_x16.md").read_text()
    opening = " ".join(reading.split("\n\n")[1].split())
    assert tied_answer_problems(opening) == []
    text = " ".join(reading.split())
    _, exponents = ladder_tables("ladder_tied_x16")
    alphas = [f"{exponents.loc[(rung, LADDER_WINDOW)].alpha:.2f}" for rung in ("x1", "x2", "x4", "x8")]
    assert f"α {', '.join(alphas)} and {interval(exponents.loc[('x16', LADDER_WINDOW)], 'alpha')}" in text
    first, _ = ladder_tables("ladder_tied_r0_x16")
    for depth in (12, 24):
        assert f"{first.r_x8[depth]:.2f} → {first.r_x16[depth]:.2f} at ℓ {depth}" in text
    assert (first.status == "not extrapolable").all()


def test_the_readme_names_the_withdrawn_certificates_of_paper_depths(results):
    readme = " ".join((ROOT / "README.md").read_text().split())
    paper_depths = next(result for result in results if result.experiment.name == "paper_depths")
    tied = paper_depths.withdrawn[("tied", None)]
    assert not paper_depths.certified
    ladder_page = words(ROOT / "experiments" / "ladder_tied_x16.md")
    assert (
        f"sit {100 * tied.above_by.min():.0f}–{100 * tied.above_by.max():.0f} % above later committed runs"
        in ladder_page
    )

    mission = next(result for result in results if result.experiment.name == "mission")
    above = pd.concat(mission.withdrawn.values()).above_by
    assert f"went {100 * above.min():.0f}–{100 * above.max():.0f} % below them" in readme


def test_no_sentence_of_the_pages_ends_at_a_colon():
    """A prose paragraph that ends with a colon is followed by what it announces (a list, a table,
    code or a figure), on every page the docs and the README hold; a page's header reading is a
    whole sentence."""
    ends_at_colon = []
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]:
        blocks = [block.strip() for block in re.split(r"\n\s*\n", page.read_text()) if block.strip()]
        for block, after in zip(blocks, [*blocks[1:], ""]):
            if block.endswith(":") and not re.match(r"[|\-*`!<>]|\d+\.", after):
                ends_at_colon.append(f"{page.relative_to(ROOT)}: …{block[-80:]}")
    assert ends_at_colon == []


def modules_missing_from_reference(page: str, modules: set[str]) -> list[str]:
    """The modules (dotted, under toymodels) that the reference page renders with no `::: …` line
    (a class of a module, `::: toymodels.config.SweepConfig`, counts for its module)."""
    rendered = set(re.findall(r"^::: toymodels\.([\w.]+)$", page, re.M))
    return sorted(
        module for module in modules if not any(entry == module or entry.startswith(module + ".") for entry in rendered)
    )


def exported_modules() -> set[str]:
    import toymodels.api

    return set(toymodels.api._EXPORTS.values()) | {"api"}


def test_the_reference_page_renders_every_module_the_api_exports_from():
    page = (ROOT / "docs" / "reference" / "index.md").read_text()
    assert modules_missing_from_reference(page, exported_modules()) == []


def test_the_reference_check_names_a_module_left_off_the_page():
    page = (ROOT / "docs" / "reference" / "index.md").read_text()
    without = page.replace("::: toymodels.results.tails\n", "")
    assert without != page and modules_missing_from_reference(without, exported_modules()) == ["results.tails"]
    assert modules_missing_from_reference("::: toymodels.config.SweepConfig\n", {"config"}) == []


def test_a_change_to_the_streams_or_the_numbers_puts_its_note_on_the_pages_it_concerns(results, monkeypatch):
    """The docs check compares each committed run's recorded stream keys and numbers' version with
    today's: raise either and the pages of the runs it concerns differ from the committed ones until
    `toymodels docs` writes their notes."""
    from toymodels.pages.site import DOCS_DIR
    from toymodels.results import provenance

    current = [
        result
        for result in results
        if "zero" in result.protocol.config.starts
        and not provenance.redrawn_students(result.protocol, RunFolder(result.folder).provenance())
    ]
    assert current, "no committed run with zero starts made under today's stream keys"
    result = current[0]
    page = ROOT / DOCS_DIR / "experiments" / f"{result.experiment.name}.md"
    assert experiment_page(result) == page.read_text()
    assert "today's code starts the zero-start" not in page.read_text()
    monkeypatch.setattr(provenance, "STREAM_KEYS", provenance.STREAM_KEYS + 1)
    noted = experiment_page(result)
    assert "today's code starts the zero-start students" in noted and "redrawn zero-start students" in noted
    assert page in stale_files([result], ROOT / DOCS_DIR, ROOT / "README.md")
    monkeypatch.undo()
    monkeypatch.setattr(provenance, "NUMBERS", provenance.NUMBERS + 1)
    assert f"Made under the numbers' version 1; today's is {provenance.NUMBERS}" in experiment_page(result)
    assert page in stale_files([result], ROOT / DOCS_DIR, ROOT / "README.md")
