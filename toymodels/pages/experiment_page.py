"""One experiment's docs page (docs/experiments/NAME.md), from its run folder, its experiment
file and its hand-written reading: the fit, the tables beside it, the certificate, the figures
and the cost."""

import math
import re
from pathlib import Path

import pandas as pd

from ..plotting.style import figure_caption
from ..registry import short_name
from ..results.depth_fit import DepthFit
from ..results.provenance import older_numbers, provenance_line, redrawn_students, redrawn_teachers
from ..results.report import (
    crossing_values,
    fit_flags,
    gap_rows,
    midway_slope,
    slope_columns,
    temperature_label,
    window_label,
)
from ..results.storage import RunFolder
from ..results.withdrawal import NOISE_ALLOWANCE, WITHDRAWAL_MARGIN, withdrawal_text
from ..workflows.experiment import FIGURES, Experiment
from ..workflows.experiment_figures import fits_drawn_with, gaps_file
from ..workflows.fits import fit_window
from .results import (
    ExperimentResult,
    alpha_cell,
    markdown_table,
    markdown_text,
    minutes_label,
    page_link,
    wall_minutes,
    wall_time_cell,
    window_width,
)


def _cost(result: ExperimentResult) -> list[str]:
    """The cost section: the run's provenance where it recorded one, and the experiment file's note.
    A joined run's is its parts' wall times summed, as the summary table gives it: its own
    provenance lists only the parts that recorded one."""
    experiment, scale = result.experiment, result.scale
    cost = experiment.cost.get(scale)
    if experiment.joined_from:
        each = ", ".join(
            f"{page_link(part)} "
            + minutes_label(
                *wall_minutes(Experiment.load(part), scale, result.folder.parent.parent / Path(part).stem / scale)
            )
            for part in experiment.joined_from
        )
        lines = [f"Its parts' runs, summed: {wall_time_cell(result)} ({each}); each part's page gives its measurement."]
    else:
        provenance = RunFolder(result.folder).provenance()
        lines = (
            [f"Measured: {provenance_line(provenance).removeprefix('provenance: ')}."]
            if provenance.get("sessions")
            else []
        )
    return lines + [f"{cost}."] if cost else lines or ["Not measured."]


def _what_a_redraw_could_change(result: ExperimentResult, provenance: dict) -> str:
    """What the redrawn zero starts decide here: how many won their race (and so are fitted, their
    losses moving with a redraw), and how far behind its winner the closest of the others ended."""
    teachers = set(redrawn_teachers(result.protocol, provenance))
    zero = [s for fit in result.fits if fit.teacher in teachers for s in fit.students if s["start"] == "zero"]
    won = sum(s["fitted"] for s in zero)
    behind = [s["gap"] for s in zero if not s["fitted"] and s["gap"] is not None]
    closest = f"; the closest of the others ended {min(behind):.0%} above its winner" if behind else ""
    if won:
        return (
            f"Of its {len(zero)} redrawn zero-start students {won} won their race and are fitted, so a redraw "
            f"moves fitted losses{closest}."
        )
    return (
        f"Of its {len(zero)} redrawn zero-start students none won its race, so none is fitted{closest}: a redraw "
        f"changes the fit only where a zero start comes out below its winner."
    )


def _made_by_older_code(result: ExperimentResult) -> list[str]:
    """The notes of a run that today's `reproduce` would not give as committed: made before every
    zero start's draws were keyed by what its student is (issue 68), or under an earlier numbers'
    version (`version.NUMBERS`). Generated from the run's provenance, so a change that raises
    either puts the note on every page it concerns, and the docs check fails until it is written."""
    provenance = RunFolder(result.folder).provenance()
    which, numbers = redrawn_students(result.protocol, provenance), older_numbers(provenance)
    notes = []
    if which:
        notes += [
            f"Made before every student's random stream was keyed by what it is (its teacher's replicate, "
            f"its temperature and depth, not their places in the lists): today's code starts the zero-start "
            f"students {' and '.join(which)} from other draws, so `reproduce` gives other numbers for them; this "
            f"page keeps the numbers as made. {_what_a_redraw_could_change(result, provenance)}",
            "",
        ]
    if numbers:
        notes += [
            f"Made under the numbers' version {numbers[0]}; today's is {numbers[1]}: code changed since makes "
            f"`reproduce` give other numbers for it (see `toymodels.version.NUMBERS`); this page keeps the numbers "
            f"as made.",
            "",
        ]
    return notes


def _found_here(result: ExperimentResult) -> str:
    """The page header's α: for a budget ladder, its last rung's over the widest window that rung
    trained at every depth (its ladder table), with the steps it ran; else the run's fit."""
    config = result.protocol.config
    table = result.folder / RunFolder.LADDER / "ladder_exponents.csv"
    if not config.budget_rungs or not table.is_file():
        return alpha_cell(result.fits)
    exponents = pd.read_csv(table).dropna(subset=["alpha"])
    exponents = exponents[exponents.rung != "inf"].assign(
        rung_number=lambda rows: rows.rung.str.removeprefix("x").astype(int),
        width=lambda rows: rows.window.map(window_width),
    )
    row = exponents.sort_values(["rung_number", "width"], ascending=False).iloc[0]
    steps = f"{config.steps * row.rung_number:_}".replace("_", " ")
    interval = (
        f" [{row.alpha_low:.2f}, {row.alpha_high:.2f}]"
        if pd.notna(row.alpha_low)
        else " (one teacher, two depths: no interval)"
    )
    return (
        f"{row.teacher} {row.alpha:.2f}{interval} at rung ×{row.rung_number} over ℓ {row.window} ({steps} steps; "
        f"every rung's α is in the reading's ladder table)"
    )


def _fit_rows(result: ExperimentResult) -> tuple[list[str], list[list[str]]]:
    """The fit table's header and rows; a T column only where the loss has temperatures."""
    fits = result.fits
    depths = sorted({d for fit in fits for d in fit.depths})
    temperatures = not all(math.isnan(fit.temperature) for fit in fits)
    header = (
        ["teacher", *["T"][:temperatures]]
        + [f"ℓ={d}" for d in depths]
        + ["α_ℓ", "95 % interval", "local slopes", "windows", "gap", "certified", "regime"]
    )
    rows = []
    for fit in fits:
        loss_at = dict(zip(fit.depths, fit.losses))
        rows.append(
            [short_name(fit.teacher), *[temperature_label(fit.temperature)][:temperatures]]
            + [f"{loss_at[d]:.3e}" if d in loss_at else "" for d in depths]
            + [
                f"{fit.alpha:.2f}",
                f"[{fit.alpha_low:.2f}, {fit.alpha_high:.2f}]",
                ", ".join(f"{slope:.2f}" for slope in fit.local_slopes),
                window_label(fit) or "—",
                "—" if fit.max_gap is None else f"{fit.max_gap:.0%}",
                "yes" if result.fit_certified(fit) else "withdrawn" if fit.group in result.withdrawn else "no",
                fit.regime.partition(" (")[0],
            ]
        )
    return header, rows


def _discretisation_rows(fits: list[DepthFit], claimed_alpha: dict) -> tuple[list[str], list[list[str]]]:
    """The table beside the fit: per teacher the untrained discretisation's losses and α, how many
    times the trained students beat it, α in the step mismatch 1/ℓ − 1/ℓ*, and the paper's α.
    No rows when no fit has references (runs without the discretised start)."""
    fits = [fit for fit in fits if fit.reference_losses and None not in fit.reference_losses]
    depths = sorted({d for fit in fits for d in fit.depths})
    temperatures = not all(math.isnan(fit.temperature) for fit in fits)
    teacher_depths = sorted({fit.teacher_depth for fit in fits if fit.teacher_depth})
    mismatch = f"α in 1/ℓ − 1/{teacher_depths[0]}" if len(teacher_depths) == 1 else r"α in 1/ℓ − 1/ℓ\*"
    header = (
        ["teacher", *["T"][:temperatures]]
        + [f"untrained ℓ={d}" for d in depths]
        + ["untrained α", "untrained / trained", mismatch, "the paper's α"]
    )
    rows = []
    for fit in fits:
        reference_at = dict(zip(fit.depths, fit.reference_losses))
        ratios = [reference / loss for reference, loss in zip(fit.reference_losses, fit.losses)]
        rows.append(
            [fit.teacher, *[temperature_label(fit.temperature)][:temperatures]]
            + [f"{reference_at[d]:.3e}" if d in reference_at else "" for d in depths]
            + [
                "—" if fit.reference_alpha is None else f"{fit.reference_alpha:.2f}",
                f"{min(ratios):.3g}–{max(ratios):.3g}",
                "—"
                if fit.mismatch_alpha is None
                else f"{fit.mismatch_alpha:.2f} [{fit.mismatch_alpha_low:.2f}, {fit.mismatch_alpha_high:.2f}]",
                f"≈ {claimed_alpha[fit.teacher]:g}" if fit.teacher in claimed_alpha else "—",
            ]
        )
    return header, rows


def reading_lead(reading: str) -> str:
    """What an experiment's reading found, for its page's header: the bold sentences that lead its
    paragraphs, or else its first sentence."""
    leads = re.findall(r"(?:\A|\n\n)\*\*(.+?)\*\*", reading, re.DOTALL)  # bold that opens a paragraph; may wrap
    lead = " ".join(" ".join(lead.split()) + ("" if lead.rstrip()[-1:] in ".?!:" else ".") for lead in leads)
    if len(lead) >= 40:  # a sentence, not a bold label
        return lead
    prose = [" ".join(p.split()) for p in reading.split("\n\n") if p.strip() and p.lstrip()[0] not in "#|-*`"]
    sentences = [sentence for paragraph in prose for sentence in re.split(r"(?<=[.?!])(?<!Fig\.)\s", paragraph)]
    return next((sentence for sentence in sentences if not sentence.endswith(":")), sentences[0])  # a whole one


CERTIFICATE_LIMITS = (
    "What a certificate cannot see: a run certifies a student from its own curve, the starts it raced, the "
    "teacher's own discretisation and (where the polish ran twice) a doubled budget; not a run that trains the "
    "same student longer or otherwise. So every committed run of the same teacher and depth is checked against "
    f"it, and one that went below by more than {WITHDRAWAL_MARGIN:.0%} + {NOISE_ALLOWANCE:.0%} (the test noise) "
    "withdraws it."
)


def _certified_line(result: ExperimentResult) -> str:
    if result.certified:
        return "yes, every fitted student, and no other committed run went below one"
    if result.any_withdrawn:
        return (
            "withdrawn: other committed runs went below its certified students (see Certificate); its α are "
            "lower bounds"
        )
    return "no: its α are lower bounds"


def _certificate(result: ExperimentResult) -> list[str]:
    fitted = [s for fit in result.fits for s in fit.students if s["fitted"]]
    certified = sum(s["certified"] for s in fitted)
    stopped = sum(len(fit.stopped) for fit in result.fits)
    lines = [
        f"{certified} of {len(fitted)} fitted students certified "
        f"({'every fit certified' if result.certified else 'uncertified fits are lower bounds'}); "
        f"{sum(len(fit.students) for fit in result.fits)} students trained"
        + (f", {stopped} starts stopped behind their leader" if stopped else "")
        + "."
    ]
    for fit in result.fits:
        name = fit.teacher + ("" if math.isnan(fit.temperature) else f", T = {fit.temperature:g}")
        withdrawn = result.withdrawn.get(fit.group)
        lines += (
            ["", f"**{name}**", ""]
            + [f"- {flag}" for flag in fit_flags(fit)]
            + (
                [
                    f"- withdrawn: {len(withdrawn)} certified student(s) sit more than {WITHDRAWAL_MARGIN:.0%} + "
                    f"{NOISE_ALLOWANCE:.0%} (the test noise) above another committed run of the same teacher and "
                    "depth: "
                    f"{withdrawal_text(withdrawn)}; its α is a lower bound"
                ]
                if withdrawn is not None
                else []
            )
        )
    lines += ["", CERTIFICATE_LIMITS]
    return lines


def _beside_the_fit(result: ExperimentResult) -> list[str]:
    header, rows = _discretisation_rows(result.fits, result.experiment.claimed_alpha)
    if not rows:
        return []
    return [
        "### Beside the untrained discretisation and the paper",
        "",
        *markdown_table(header, rows),
        "",
        "Untrained: the discretisation of the teacher's flow in ℓ steps of the students' rule, not trained (the "
        "reference every student is certified against), geometric mean over teacher replicates; untrained / trained: "
        "its loss over the fitted students', the range over depths; α in 1/ℓ − 1/ℓ\\*: the trained losses' "
        "exponent in the step mismatch, which a pure discretisation error makes the same at every depth "
        "up to ℓ\\*, where the log–log α rises instead.",
        "",
    ]


def _gaps_to_optimum(result: ExperimentResult) -> list[str]:
    optimum = result.experiment.optimum_from
    path = result.folder / f"{gaps_file(optimum)}.csv" if optimum else None
    if path is None or not path.is_file():
        return []
    header, rows = gap_rows(pd.read_csv(path))
    return [
        f"### Beside the certified students of [{optimum}]({optimum}.md)",
        "",
        *markdown_table(header, rows),
        "",
        f"Optimum: the fitted (best, certified) student of {optimum} on the same teacher at that depth; gap: "
        "this run's final test loss over it − 1 (negative: this run went below the certified loss, which is then "
        "no optimum); best of both: the lower of the two losses, where the certificate's best of all starts "
        "would put it; α: the three log–log slopes over these depths.",
        "",
    ]


def _number(value) -> str:
    return "—" if value is None or math.isnan(value) else f"{value:.2f}"


def _figure_tables(result: ExperimentResult) -> list[str]:
    """The numbers of each figure that has a table (α against ρ), from the fits it draws: the
    experiment's own and its `drawn_with` experiments' committed ones; with, per depth window, the
    parameter where the local slope first reaches halfway from the ensemble law to the coherent law."""
    experiment, lines = result.experiment, []
    tabled = [FIGURES[name] for name in experiment.figures if FIGURES[name].table]
    results = result.folder.parent.parent  # committed as RESULTS/NAME/SCALE, beside the others
    beside, drawn = (
        fits_drawn_with(experiment, result.scale, result.protocol.config, results, results) if tabled else ([], [])
    )
    for figure in tabled:
        table = figure.table(beside + result.fits)
        parameter, windows = table.columns[0], slope_columns(table)
        symbol = {"rho": "ρ"}.get(parameter, parameter)
        header = [
            symbol,
            "α_ℓ [95 %]",
            "certified",
            "untrained α",
            *(f"local slope ℓ {window}" for window in windows.values()),
        ]
        rows = [
            [
                f"{row[parameter]:g}",
                f"{row['alpha']:.2f} [{row['alpha_low']:.2f}, {row['alpha_high']:.2f}]",
                "yes" if row["certified"] else "no (a lower bound)",
                _number(row["untrained_alpha"]),
                *(_number(row[column]) for column in windows),
            ]
            for row in table.to_dict("records")
        ]
        level = midway_slope(result.protocol.architecture.order)
        crossings = "; ".join(
            f"ℓ {windows[column]} {crossing}" for column, crossing in crossing_values(table, parameter, level).items()
        )
        lines += [
            f"## The numbers of {figure.file_name}",
            "",
            f"From the fits of {', '.join([*drawn, experiment.name])}.",
            "",
            *markdown_table(header, rows),
            "",
            f"Where the local slope first reaches {level:g}, halfway from the ensemble law to the students' "
            f"coherent law, linear between the measured {symbol}: {crossings} (≤: already at the first "
            f"{symbol} measured; >: not by the last).",
            "",
        ]
    return lines


def experiment_page(result: ExperimentResult) -> str:
    """The docs page of one experiment, from its run folder and its file (and its notes, if any)."""
    experiment, name, scale = result.experiment, result.experiment.name, result.scale
    data = f"../figures/{name}/{scale}"
    header, rows = _fit_rows(result)
    _, window = fit_window(RunFolder(result.folder))
    reading_file = Path(experiment.source).with_suffix(".md")  # the hand-written reading, beside the file
    reading = reading_file.read_text().strip() if reading_file.is_file() else ""
    lines = [
        "---",
        "hide: [toc]  # the fit table needs the width",
        "---",
        f"<!-- generated by `toymodels docs` from figures/{name}/{scale}, experiments/{name}.toml and its "
        f"reading experiments/{name}.md; edit those, not this page -->",
        f"# {markdown_text(experiment.title)}",
        "",
        f"- **The paper:** {experiment.claim or '—'}",
        f"- **Found here:** {_found_here(result)}",
        f"- **Certified:** {_certified_line(result)}",
        f"- **Reproduce:** `toymodels reproduce {name} --scale {scale} --compile`"
        + (
            f": it joins the runs of its parts, {', '.join(map(page_link, experiment.joined_from))}, each "
            f"trained in one sitting"
            if experiment.joined_from
            else ""
        ),
        f"- **Data:** [fits.csv]({data}/fits.csv) (`toymodels.load_fits`), [fit.json]({data}/fit.json), "
        f"[config.json]({data}/config.json), "
        f"[metrics.csv]({data}/metrics.csv) (one row per student and evaluation)",
        *([f"- **Reading:** {reading_lead(reading)}"] if reading else []),
        "",
        *([reading, ""] if reading else []),
        "## Protocol",
        "",
        experiment.caption(scale, result.protocol) + ".",
        "",
        *_made_by_older_code(result),
        "## Fit",
        "",
        *markdown_table(header, rows),
        "",
        "Final test loss, geometric mean over teacher replicates; α_ℓ: the mean of the replicates' log–log "
        "slopes with its 95 % t-interval; local slopes: between neighbouring fitted depths; windows: the "
        "range of α over every run of three or more neighbouring depths; "
        "gap: the largest optimisation gap of a fitted student; regime: the law on whose side of the midpoint "
        "between the ensemble law (α 1) and the students' procedural one (2 × their order) the whole interval "
        "lies, over this window only (an ensemble α below 1 is the window's reading, not the law's)."
        + (f" {window}." if window else ""),
        "",
        *_beside_the_fit(result),
        *_gaps_to_optimum(result),
        *_figure_tables(result),
        "## Certificate",
        "",
        *_certificate(result),
        "",
        "## Figures",
        "",
    ]
    for file in result.figure_files():
        caption = figure_caption(result.folder / file)
        lines += [
            f"![{file.removesuffix('.png')}]({data}/{file})",
            "",
            *([f"*{markdown_text(caption)}*", ""] if caption else []),
        ]
    lines += ["## Cost", "", *_cost(result), ""]
    return "\n".join(lines)
