"""The docs cannot drift from the data: the generated results pages equal what the committed runs
give, every link resolves, and the site builds with warnings as errors."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from toymodels.api import fit_run, load_fits
from toymodels.cli import main
from toymodels.models.teachers import parse_teacher
from toymodels.pages import (ExperimentResult, committed_results, experiment_page, findings, stale_files,
                             summary_points, summary_table)
from toymodels.plotting.summary import plot_summary
from toymodels.results.report import crossing_values, midway_slope, parameter_map

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "figures"


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
    assert sorted(path.as_posix() for path in stale) == ["README.md", "docs/experiments/index.md",
                                                         "docs/experiments/regimes.md", "docs/index.md"]


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
            rho = parse_teacher(fit.teacher)[1]["rho"]
            row = next(line for line in table.splitlines() if line.startswith(f"| {rho:g} |"))
            assert f"| {fit.alpha:.2f} [{fit.alpha_low:.2f}, {fit.alpha_high:.2f}] | yes |" in row
            assert row.endswith(" | ".join(f"{slope:.2f}" for slope in fit.local_slopes) + " |")


def test_the_readmes_crossover_numbers_are_the_committed_runs_crossings_and_slopes(results):
    """The README's verdict on the ρ crossover quotes the crossings and deep slopes the runs give."""
    fits = {result.experiment.name: result.fits for result in results}
    readme = " ".join((ROOT / "README.md").read_text().split())

    def crossings(*names):
        table = parameter_map([fit for name in names for fit in fits[name]], "rho")
        return list(crossing_values(table, "rho", midway_slope(1)).values())

    over_4_32 = crossings("crossover_low", "crossover_mid", "crossover_high")
    assert [crossing.bound for crossing in over_4_32] == ["at"] * 3
    assert ("moves up as depth doubles: about {:.2f} (ℓ 4→8), {:.2f} (8→16), {:.2f} (16→32)."
            .format(*(crossing.value for crossing in over_4_32))) in readme
    deep = crossings("crossover_deep", "crossover_deep_98")[-1]  # the ℓ 32→64 window
    (rho_95,), (rho_98,) = fits["crossover_deep"], fits["crossover_deep_98"]
    assert f"slope falls to {rho_95.local_slopes[-1]:.2f} over ℓ 32→64" in readme
    assert f"reaches {rho_98.local_slopes[-1]:.2f} there, so that window's midpoint is near {deep.value:.2f}" in readme
    assert deep.bound == "at"


def test_the_summary_has_a_line_per_experiment_and_marks_lower_bounds(results):
    table = summary_table(results).splitlines()
    assert len(table) == 2 + len(results)
    uncertified = results[0].fits[0].__class__(**{**vars(results[0].fits[0]), "converged": False})
    lower = ExperimentResult(results[0].experiment, "cpu", results[0].folder, results[0].protocol, [uncertified])
    assert "no: lower bounds" in summary_table([lower])
    assert summary_points([lower]) == []  # the figure shows certified fits only


def test_the_summary_figure_is_drawn(results, tmp_path):
    paths = plot_summary(summary_points(results), "caption", tmp_path / "summary")
    assert [path.suffix for path in paths] == [".png", ".pdf"] and all(path.stat().st_size > 0 for path in paths)


def test_docs_check_exits_1_on_a_stale_page_of_the_repository_it_is_given(tmp_path, monkeypatch):
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs", symlinks=True, ignore=shutil.ignore_patterns("figures"))
    shutil.copy(ROOT / "README.md", copy / "README.md")
    monkeypatch.chdir(tmp_path)  # not the repository: --root names it
    assert CliRunner().invoke(main, ["docs", "--check", "--reference", str(RESULTS), "--root", str(copy)]).exit_code == 0
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
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                           cwd=ROOT, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr[-3000:]
    assert (tmp_path / "site" / "experiments" / "regimes" / "index.html").is_file()
    assert (tmp_path / "site" / "reference" / "index.html").is_file()


INTERVAL = re.compile(r"(-?\d+\.\d\d) \[(-?\d+\.\d\d), (-?\d+\.\d\d)\]")  # an α quoted with its interval


def quoted_intervals(text: str) -> list[tuple[str, str, str]]:
    """The 'α [low, high]' triples a hand-written text quotes, outside code blocks (a command's
    output) and the generated summary."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    text = re.sub(r"<!-- summary.*?<!-- end of summary -->", "", text, flags=re.S)
    return INTERVAL.findall(text)


def test_every_alpha_the_prose_quotes_with_its_interval_is_a_committed_runs_fit(results):
    committed = set()
    for fit in (fit for result in results for fit in result.fits):
        committed.add((f"{fit.alpha:.2f}", f"{fit.alpha_low:.2f}", f"{fit.alpha_high:.2f}"))
        if fit.mismatch_alpha is not None:
            committed.add((f"{fit.mismatch_alpha:.2f}", f"{fit.mismatch_alpha_low:.2f}", f"{fit.mismatch_alpha_high:.2f}"))
    texts = [ROOT / "README.md", *sorted((ROOT / "experiments").glob("*.md")), *sorted((ROOT / "docs").glob("*.md"))]
    quoted = {(path.name, triple) for path in texts for triple in quoted_intervals(path.read_text())}
    assert len(quoted) >= 5  # the README and the readings quote them
    assert [(name, triple) for name, triple in sorted(quoted) if triple not in committed] == []


@pytest.mark.parametrize("fit_json", sorted(RESULTS.glob("**/fit.json")), ids=lambda path: str(path.parent.relative_to(RESULTS)))
def test_every_committed_runs_table_agrees_with_its_fit_json(fit_json):
    document = json.loads(fit_json.read_text())
    table = load_fits(fit_json.parent)
    assert len(table) == len(document["fits"])
    for row, fit in zip(table.itertuples(), document["fits"]):
        assert (row.teacher, row.certified, row.regime) == (fit["teacher"], fit["converged"], fit["regime"])
        assert (row.fit_min_depth, row.depths) == (document["window"]["min_depth"], " ".join(map(str, fit["depths"])))
        assert min(fit["depths"]) >= row.fit_min_depth
        assert [row.alpha, row.alpha_low, row.alpha_high] == pytest.approx([fit["alpha"], fit["alpha_low"],
                                                                          fit["alpha_high"]], rel=1e-12, nan_ok=True)
    assert not (fit_json.parent / "summary.csv").exists()  # the file that once disagreed is gone


def test_the_findings_count_every_committed_fit_and_keep_lower_bounds_apart(results):
    text = findings(results)
    assert f"({sum(len(result.fits) for result in results)} fits in {len(results)} experiments" in text
    tied = next(line for line in text.splitlines() if line.startswith("- **tied teacher, Euler students:**"))
    certified = [fit.alpha for result in results for fit in result.fits
                 if fit.teacher == "tied" and fit.converged and result.protocol.config.student == "euler"
                 and result.protocol.config.teacher_depth == 128]
    assert f"{len(certified)} certified fits" in tied and f"α {min(certified):.2f}–{max(certified):.2f}" in tied
    assert "lower bound" in tied  # the uncertified fits are counted apart, never in the range


def test_the_readmes_verdict_numbers_are_what_the_verdict_table_gives_on_the_committed_runs():
    """The paper's loop over its six depths, fitted across paper_budget and paper_budget_deep by
    benchmarks/verdict_table.py, is quoted as the script prints it; so are the second and third tied
    teachers' α on the final protocol, and the α of the three joined (paper_depths_final_tied's fit.json),
    and the joined independent teachers' α, budget moves and local slopes."""
    printed = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "verdict_table.py"), str(RESULTS)],
                             capture_output=True, text=True, check=True).stdout
    line = next(line for line in printed.splitlines() if line.startswith("paper loop 80k"))
    alpha, low, high = re.search(r"α (\S+) \[(\S+), (\S+)\]", line).groups()
    *first, last = line.split("local slopes ")[1].split(", ")
    readme = " ".join((ROOT / "README.md").read_text().split())
    assert "ℓ 6–48" in line and f"gives α {alpha} over the six depths" in readme
    assert f"regression interval {low}–{high}" in readme and f"local slopes {', '.join(first)} and {last}" in readme
    for teacher, then in ((2, "; on its third"), (3, ". Over the three teachers")):
        alphas = {kind: re.search(r"α (\S+) \[", line).group(1) for line in printed.splitlines()
                  for kind in ("certified", "polished", "doubled") if line.startswith(f"{kind}, teacher {teacher} ")}
        assert (f"α {alphas['certified']} certified, {alphas['polished']} polished and {alphas['doubled']} "
                f"doubled") in readme
        *first, last = next(line for line in printed.splitlines()
                            if line.startswith(f"doubled, teacher {teacher} ")).split("local slopes ")[1].split(", ")
        assert f"local slopes {', '.join(first)} and {last}{then}" in readme
    joined = json.loads((RESULTS / "paper_depths_final_tied" / "cpu" / "fit.json").read_text())["fits"][0]
    assert f"{joined['alpha']:.2f} [{joined['alpha_low']:.2f}, {joined['alpha_high']:.2f}]" in readme
    assert not joined["converged"] and "so the fit certifies none of these runs" in readme  # doubling moved them
    budget = pd.read_csv(RESULTS / "paper_depths_final_tied" / "cpu" / "budget_doubling.csv")
    assert (f"moved {(~budget.budget_certified).sum()} of the {len(budget)} students beyond the test set's noise"
            in readme)
    assert f"raised α from {budget.alpha_polished[0]:.2f} to {budget.alpha_doubled[0]:.2f}" in readme
    independent = json.loads((RESULTS / "paper_depths_final_independent" / "cpu" / "fit.json").read_text())["fits"][0]
    budget = pd.read_csv(RESULTS / "paper_depths_final_independent" / "cpu" / "budget_doubling.csv")
    *first, last = (f"{slope:.2f}" for slope in independent["local_slopes"])
    assert (f"Over the three independent teachers it gives {independent['alpha']:.2f} [{independent['alpha_low']:.2f}, "
            f"{independent['alpha_high']:.2f}]") in readme and independent["regime"].startswith("undetermined")
    assert (f"moved {(~budget.budget_certified).sum()} of the {len(budget)} students beyond the noise, by at most "
            f"{-100 * budget.move.min():.0f} %, and raised α from {budget.alpha_polished[0]:.2f} to "
            f"{budget.alpha_doubled[0]:.2f}") in readme
    assert f"local slopes ({', '.join(first)} and {last} over the three) do not fall" in readme
    # the headline's range spans every trained row type of every tied teacher, the paper's loop at its budget included
    trained = [float(re.search(r"α (\S+) \[", line).group(1)) for line in printed.splitlines()
               if re.match(r"(certified|polished|doubled|paper loop 80k)\b.*ℓ 6–48: α", line)]
    assert f"gives the tied teacher α between {min(trained):.2f} and {max(trained):.2f} over ℓ 6–48" in readme


def test_the_readmes_split_of_the_final_protocols_exponents_is_the_joined_runs_layer_errors():
    """The doubled students' output-error exponent, split into the local errors' and C's, as the
    joined runs' layer_errors/error_exponents.csv give it (even slots, as the read-out sees them)."""
    readme = " ".join((ROOT / "README.md").read_text().split())
    split = {}
    for teacher in ("tied", "independent"):
        table = pd.read_csv(RESULTS / f"paper_depths_final_{teacher}" / "cpu" / "layer_errors" / "error_exponents.csv")
        split[teacher] = next(table[(table.start == "doubled") & (table.training == "trained") & (table.space == "readout")
                                    & (table.slots == "even")].itertuples())
    tied, independent = split["tied"], split["independent"]
    assert f"the tied teacher's {tied.alpha_output_error:.2f} is {tied.alpha_local_error_sum:.2f} from local errors" in readme
    assert abs(tied.alpha_coherence) < 0.1  # "almost nothing from C"
    assert (f"the independent teacher's {independent.alpha_output_error:.2f} is {independent.alpha_local_error_sum:.2f} "
            f"from local errors and {independent.alpha_coherence:.2f} from C falling") in readme
