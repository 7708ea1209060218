"""What the committed runs found, across experiments: the summary table (the Results page's, and
the README's headline rows), the findings lines, the site's navigation entries and the summary
figure's points."""

import json
from collections import Counter

from ..plotting.summary import FAMILY_ORDER, SummaryPoint
from ..registry import parse_call
from ..results.depth_fit import DepthFit
from ..workflows.experiment import Experiment
from .results import ExperimentResult, alpha_cell, alpha_interval, markdown_table, markdown_text, wall_time_cell

# The README's table, ordered by importance: the answer to the paper's question first, then what
# the README's finding names; the Results page's table and the site's navigation open with them.
HEADLINE = (
    "paper_depths_final_tied",
    "paper_depths_final_independent",
    "paper_depths",
    "paper_budget",
    "teacher24",
    "rk2",
    "fig3b",
    "crossover_high",
)


def paper_alpha(experiment: Experiment) -> str:
    """The α the paper gives for the experiment's teachers (its full claim is on the page)."""
    return ", ".join(f"{teacher} ≈ {alpha:g}" for teacher, alpha in experiment.claimed_alpha.items()) or "—"


def summary_table(results: list[ExperimentResult], link=lambda name: f"{name}.md") -> str:
    """One line per experiment: α per teacher, certified or not, wall time, the paper's claim."""
    rows = []
    for result in results:
        experiment = result.experiment
        certified = (
            "yes" if result.certified else "withdrawn: lower bounds" if result.any_withdrawn else "no: lower bounds"
        )
        rows.append(
            [
                f"[{experiment.name}]({link(experiment.name)})",
                markdown_text(experiment.title),
                alpha_cell(result.fits),
                certified,
                wall_time_cell(result),
                paper_alpha(experiment),
            ]
        )
    if not results:  # a results tree without these experiments (`docs --reference` a partial one)
        return "No committed run of these experiments in this results tree."
    header = [
        "experiment",
        "what",
        "α_ℓ [95 % interval]",
        "certified",
        f"wall time ({results[0].scale} scale, 2-core CPU)",
        "the paper's α",
    ]
    return "\n".join(markdown_table(header, rows))


def by_importance(results: list[ExperimentResult]) -> list[ExperimentResult]:
    """The headline experiments first, in HEADLINE's order, then the others by name: the order of
    the Results page's table and of the site's navigation."""
    rank = {name: i for i, name in enumerate(HEADLINE)}
    return sorted(results, key=lambda result: (rank.get(result.experiment.name, len(HEADLINE)), result.experiment.name))


def summary_block(results: list[ExperimentResult]) -> str:
    """The Results page's table of every experiment, the README's headline rows first."""
    headline = sum(result.experiment.name in HEADLINE for result in results)
    return "\n".join(
        [
            f"Every committed experiment at {results[0].scale} scale, read from its run folder; the first {headline} "
            "rows are the headline ones the README shows. A certified fit is one whose every fitted student flattened "
            "under the plateau test, came within 10 % of the best loss any start (or the untrained discretisation) "
            "reached on its teacher at its depth, and was trained on fresh samples; an uncertified α is a lower bound.",
            "",
            summary_table(by_importance(results)),
        ]
    )


NAV_INDENT = " " * 6  # the experiment entries' place under the navigation's Results section


def navigation(results: list[ExperimentResult]) -> str:
    """The site's navigation entries of the experiment pages (mkdocs.yml), so that every committed
    experiment's page is reachable: each titled by its experiment file, in the Results table's order."""
    return "\n".join(
        f"{NAV_INDENT}- {json.dumps(result.experiment.title, ensure_ascii=False)}: "
        f"experiments/{result.experiment.name}.md"
        for result in by_importance(results)
    )


def summary_points(results: list[ExperimentResult]) -> list[SummaryPoint]:
    """The fits of the headline experiments, the README's table's rows, for the summary figure:
    each certified, a lower bound, or withdrawn by another committed run, with the paper's claim
    for its teacher."""
    return [
        SummaryPoint(
            result.experiment.name,
            fit.teacher,
            fit.temperature,
            fit.alpha,
            fit.alpha_low,
            fit.alpha_high,
            result.experiment.claimed_alpha.get(fit.teacher),
            result.protocol.config.student,
            result.fit_certified(fit),
            fit.group in result.withdrawn,
        )
        for result in by_importance(results)
        if result.experiment.name in HEADLINE
        for fit in result.fits
    ]


PAPER_TEACHER_DEPTH = 128

STUDENT_NAMES = {"euler": "Euler", "rk2": "RK2 (midpoint)", "lns": "LayerNorm-Scaling"}


def findings(results: list[ExperimentResult], pages_at: str = "under [Results](experiments/index.md)") -> str:
    """What the committed runs found, one line per teacher family and student architecture: how
    many certified fits, their α range and the regimes they name, the paper's claim, and how many
    more are lower bounds. Generated, so it follows the runs."""
    groups: dict[tuple[str, str], list[tuple[ExperimentResult, DepthFit]]] = {}
    for result in results:
        for fit in result.fits:
            config = result.protocol.config
            groups.setdefault((parse_call("teacher", fit.teacher)[0], config.teacher_depth, config.student), []).append(
                (result, fit)
            )
    rank = {family: i for i, family in enumerate(FAMILY_ORDER)}
    lines = [
        f"What the committed runs show at {results[0].scale} scale ({sum(map(len, groups.values()))} fits in "
        f"{len(results)} experiments; each has its page {pages_at}):",
        "",
    ]
    for (family, teacher_depth, student), members in sorted(
        groups.items(), key=lambda item: (rank.get(item[0][0], 99), item[0][1] != PAPER_TEACHER_DEPTH, item[0])
    ):
        certified = [fit for result, fit in members if result.fit_certified(fit)]
        bounds = [fit for result, fit in members if not result.fit_certified(fit)]
        parameters = sorted({value for _, fit in members for value in parse_call("teacher", fit.teacher)[1].values()})
        name = (
            f"{family} teacher{f' (ρ {parameters[0]:g}–{parameters[-1]:g})' if len(parameters) > 1 else ''}"
            f"{f' of depth {teacher_depth}' if teacher_depth != PAPER_TEACHER_DEPTH else ''}, "
            f"{STUDENT_NAMES.get(student, student)} students"
        )
        text = f"- **{name}:** "
        if certified:
            alphas = [fit.alpha for fit in certified]
            regimes = Counter(fit.regime.partition(" (")[0] for fit in certified)
            named = ", ".join(f"{regime} {count}" for regime, count in regimes.most_common())
            experiments = len({result.experiment.name for result, fit in members if result.fit_certified(fit)})
            alpha = (
                f"α {min(alphas):.2f}–{max(alphas):.2f}" if len(certified) > 1 else f"α {alpha_interval(certified[0])}"
            )
            text += (
                f"{len(certified)} certified fit{'s' * (len(certified) > 1)} in {experiments} "
                f"experiment{'s' * (experiments > 1)}, {alpha} ({named})"
            )
        if bounds:
            text += ("; " if certified else "") + (
                f"{len(bounds)} lower bound{'s' * (len(bounds) > 1)} (not certified, or withdrawn), "
                f"up to α {max(fit.alpha for fit in bounds):.2f}"
            )
        claims = sorted(
            {
                result.experiment.claimed_alpha[fit.teacher]
                for result, fit in members
                if fit.teacher in result.experiment.claimed_alpha
            }
        )
        lines.append(text + (f"; the paper: ≈ {', '.join(f'{claim:g}' for claim in claims)}." if claims else "."))
    return "\n".join(lines)
