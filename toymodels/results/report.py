"""Fits of a run as a table for people (terminal, summary.txt) and as a document for programs (--json).

A `protocol` here is a run's resolved protocol (training.protocol.Protocol), read for its `config` and
its `loss` only: the results are told how they were trained, never train."""

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..models.starts import REFERENCE_START, TRAINED_START
from ..registry import parse_call, short_name
from .certification import FIT_TOLERANCE, GAP_TOLERANCE
from .depth_fit import DepthFit
from .exponents import ENSEMBLE_ALPHA, fit_power_law, procedural_alpha, t_half_width
from .storage import RunFolder


def protocol_line(protocol) -> str:
    """Never quote an α without its protocol."""
    config = protocol.config
    lr = f"lr {config.lr:g}" + (f"/ℓ^{config.lr_depth_exponent:g}" if config.lr_depth_exponent else "")
    lr += "".join(f", {rate:g} at ℓ={depth}" for depth, rate in config.depth_lr)
    if config.converge:
        plateau = (
            f"{config.patience} checks of {config.check_every} steps under {config.plateau_tolerance:.0%}"
            if config.plateau_test == "relative"
            else f"the trend of {config.patience + 1} windows of {config.check_every} steps under "
            f"{config.plateau_tolerance:.0%} per window with 95 % confidence"
        )
        training = (
            f"until converged (plateau: {plateau}; rate × {config.lr_decay:g}, {config.decays} times), "
            f"budget {config.steps} steps"
        )
    else:
        training = f"{config.steps} steps"
    head = ", head lr depth-scaled" if config.head_lr_depth_scaled and protocol.loss.student_head_width(config) else ""
    data = f", teacher samples from a pool of {config.teacher_pool}" if config.teacher_pool else ""
    data += f" relabelled every {config.pool_refresh} steps" if config.pool_refresh else ""
    starts = f", starts {'+'.join(config.starts)}" if config.starts != ("zero",) else ""
    if config.pretrain_loss is not None:
        starts += (
            f" (layers first trained on {config.pretrain_loss} from {'+'.join(config.pretrain_starts)} until converged)"
        )
    if config.race and config.converge and len(config.starts) > 1:
        starts += (
            f" racing (a start > {config.race_margin:.0%} above its converged leader from step "
            f"{config.race_from_step} stops)"
        )
    optimizer = f", {config.optimizer}" if config.optimizer != "adam" else ""
    polish = ""
    if config.polish_batch:
        spent = config.decays if config.trained_decays_spent is None else config.trained_decays_spent
        polish = (
            f", then each student's best start polished until converged × batch {config.polish_batch}, "
            f"from its rate × {config.lr_decay:g}^{spent}"
        )
        polish += ", and again with twice its budget" if config.budget_doubling else ""
    if config.budget_rungs:
        polish += f", and again at ×{', ×'.join(map(str, config.budget_rungs))} its budget (the ladder)"
    return (
        f"{config.loss} loss, {config.student} students{starts}, teacher depth {config.teacher_depth}, "
        f"{training} × batch {config.batch}, {lr} ({config.schedule}){optimizer}{polish}{head}{data}, "
        f"{config.replicates} replicate(s), seed {config.seed}"
        + (f", {config.precision} matmuls" if config.precision != "fp32" else "")
    )


def temperature_label(temperature: float) -> str:
    """MSE runs have no temperature (NaN in the tidy data): shown as a dash."""
    return "—" if math.isnan(temperature) else f"{temperature:.3g}"


PROTOCOL_COLUMNS = (
    "loss",
    "student",
    "schedule",
    "batch",
    "lr",
    "lr_depth_exponent",
    "teacher_depth",
    "width",
    "vocab",
    "converge",
    "starts",
    "teacher_pool",
    "seed",
)  # what a fits.csv row was measured under


def fits_table(fits: list[DepthFit], config: dict, min_depth: int = 1, max_depth: int | None = None) -> pd.DataFrame:
    """The run's fits as one tidy row per (teacher, temperature): α, its interval, the depth window it
    was fitted over (`fit_min_depth`, `fit_max_depth`, the `depths` it read), whether it is certified,
    its regime, the final loss of each depth (`loss_depth_D`, the start that gave it, the untrained
    discretisation's) and the protocol keys it was measured under (`config`: the run's config as a
    dict, e.g. fit.json's "protocol"). fits.csv is this frame, fit.json the same fits in full."""
    rows = []
    for fit in fits:
        row = {
            "teacher": fit.teacher,
            "temperature": fit.temperature,
            "alpha": fit.alpha,
            "alpha_low": fit.alpha_low,
            "alpha_high": fit.alpha_high,
            "certified": fit.certified,
            "regime": fit.regime,
            "fit_min_depth": min_depth,
            "fit_max_depth": max_depth,
            "depths": " ".join(map(str, fit.depths)),
            "interval": fit.interval,
            "replicates": fit.replicates,
            "steps": fit.steps,
            "max_gap": fit.max_gap,
            "reference_alpha": fit.reference_alpha,
            "mismatch_alpha": fit.mismatch_alpha,
            "mismatch_alpha_low": fit.mismatch_alpha_low,
            "mismatch_alpha_high": fit.mismatch_alpha_high,
            "window_alpha_min": fit.window_alpha_min,
            "window_alpha_max": fit.window_alpha_max,
            "uncertified_depths": " ".join(map(str, fit.uncertified_depths)),
            "diverged": " ".join(f"{d['depth']}:r{d['replicate']}@{d['step']}" for d in fit.diverged),
        }
        row.update({f"loss_depth_{d}": loss for d, loss in zip(fit.depths, fit.losses)})
        row.update({f"start_depth_{d}": start for d, start in zip(fit.depths, fit.best_starts)})
        row.update({f"reference_depth_{d}": loss for d, loss in zip(fit.depths, fit.reference_losses)})
        row.update({key: " ".join(config[key]) if key == "starts" else config.get(key) for key in PROTOCOL_COLUMNS})
        rows.append(row)
    return pd.DataFrame(rows)


def slope_column(window: tuple[int, int]) -> str:
    return f"slope {window[0]}→{window[1]}"


def slope_columns(table: pd.DataFrame) -> dict[str, str]:
    """The depth-window columns of a `parameter_map` frame, each with its window's label (`4→8`)."""
    return {column: column.removeprefix("slope ") for column in table.columns if column.startswith("slope ")}


def parameter_map(fits: list[DepthFit], parameter: str) -> pd.DataFrame:
    """α against a parameter of the teacher dynamics (ρ of `correlated(rho=…)`), one row per teacher
    sorted by it: α with its interval, the untrained discretisation's α, and the local slope of each
    depth window (`slope 4→8`, …; empty where a fit lacks that window). The α-against-ρ figure, its
    CSV and its docs table are all this frame."""
    windows = sorted({(d, e) for f in fits for d, e in zip(f.depths, f.depths[1:])})
    rows = []
    for fit in fits:
        slopes = dict(zip(zip(fit.depths, fit.depths[1:]), fit.local_slopes))
        rows.append(
            {
                parameter: parse_call("teacher", fit.teacher)[1][parameter],
                "teacher": fit.teacher,
                "temperature": fit.temperature,
                "alpha": fit.alpha,
                "alpha_low": fit.alpha_low,
                "alpha_high": fit.alpha_high,
                "certified": fit.certified,
                "untrained_alpha": fit.reference_alpha,
                **{slope_column(window): slopes.get(window, np.nan) for window in windows},
            }
        )
    return pd.DataFrame(rows).sort_values(parameter, ignore_index=True)


def midway_slope(order: int) -> float:
    """Halfway between the ensemble law and the coherent law of an order-`order` students' rule."""
    return (ENSEMBLE_ALPHA + procedural_alpha(order)) / 2


@dataclass(frozen=True)
class Crossing:
    """Where a depth window's local slope first reaches a level along a parameter: `at` it (linear
    between the measured values), `at most` the first measured value when already reached there,
    `above` the last when never reached; None when the window was never measured."""

    value: float | None
    bound: str = "at"  # "at", "at most" or "above"

    def __str__(self) -> str:
        if self.value is None:
            return "—"
        return {"at": "at ", "at most": "≤ ", "above": "> "}[self.bound] + f"{self.value:.2f}"


def crossing_values(table: pd.DataFrame, parameter: str, level: float) -> dict[str, Crossing]:
    """Per depth window (`slope a→b` column of `parameter_map`): where its local slope first reaches
    `level` along `parameter`, or the bound the measured values put on it."""
    crossings = {}
    for column in slope_columns(table):
        measured = table[[parameter, column]].dropna().to_numpy()
        if not len(measured):
            crossings[column] = Crossing(None)
        elif measured[0, 1] >= level:
            crossings[column] = Crossing(float(measured[0, 0]), "at most")
        else:
            crossings[column] = Crossing(float(measured[-1, 0]), "above")
            for (x0, y0), (x1, y1) in zip(measured, measured[1:]):
                if y1 >= level:
                    crossings[column] = Crossing(float(x0 + (x1 - x0) * (level - y0) / (y1 - y0)))
                    break
    return crossings


def fit_flags(fit: DepthFit) -> list[str]:
    """What a reader must know before trusting the row's α."""
    flags = [f"regime {fit.regime}"] if fit.regime.startswith("undetermined") else []  # and why
    if fit.diverged:
        flags.append(
            "diverged, left out: "
            + ", ".join(f"ℓ={d['depth']} r{d['replicate']} at step {d['step']}" for d in fit.diverged)
        )
    if fit.excluded_depths:
        flags.append(
            "ℓ=" + ",".join(map(str, fit.excluded_depths)) + " not fitted (a replicate lacks it, or reached loss 0)"
        )
    if not fit.certified:
        flags.append("not certified at " + "; ".join(uncertified_reasons(fit)))
    return flags + certificate_lines(fit)


def _percent(gap) -> str:
    """A gap as a percentage; from 10 000 % on, as how many times the best loss it is (a student
    far from its best reads ×45205, not 4520419 %)."""
    if gap is None:
        return "—"
    return "∞" if math.isinf(gap) else f"×{1 + gap:.0f}" if gap >= 100 else f"{gap:.0%}"


def uncertified_reasons(fit: DepthFit) -> list[str]:
    """Why each uncertified depth is: its best student had not flattened, ends above the best loss
    its architecture reached (the untrained discretisation, when nothing trained beat it), fits its
    samples, or moved beyond the test set's noise when its polish ran again with twice the budget.
    Depths with the same reasons share one entry: `ℓ=12, 16 (1/1 still improving)`."""
    reasons = {}  # why → its depths, in order
    for depth in fit.uncertified_depths:
        fitted = [s for s in fit.students if s["depth"] == depth and s["fitted"]]  # one per replicate
        best = [s for s in fitted if not s["certified"]]
        still_falling = sum(not s["flattened"] for s in best)
        worst = max((s["gap"] for s in best if s["gap"] is not None), default=None)
        why = []
        if still_falling:
            why.append(f"{still_falling}/{len(fitted)} still improving")
        if worst is not None and worst > GAP_TOLERANCE:
            why.append(f"gap {_percent(worst)} above the untrained discretisation")
        fitting = [s["test_loss"] / s["train_loss"] for s in best if s.get("fits_its_data")]
        if fitting:
            why.append(f"{len(fitting)}/{len(fitted)} fit their samples: test/train up to {max(fitting):.2f}")
        moved = sum(not s.get("budget_certified", True) for s in best)
        if moved:
            why.append(f"{moved}/{len(fitted)} moved beyond the noise with twice the budget")
        reasons.setdefault(", ".join(why), []).append(str(depth))
    return [f"ℓ={', '.join(depths)} ({why})" for why, depths in reasons.items()]


def certificate_lines(fit: DepthFit) -> list[str]:
    """What the certificate says of a fit: the start that gave each fitted loss and every start's
    largest gap per depth, the untrained discretisation beside the fit, and α in the step mismatch."""
    if not fit.students:  # a fit from before certificates
        return []
    starts = sorted({s["start"] for s in fit.students})
    lines = []
    if len(starts) > 1:
        lines.append("best start: " + ", ".join(f"ℓ={d} {start}" for d, start in zip(fit.depths, fit.best_starts)))
        gaps = [
            f"ℓ={d} "
            + "/".join(
                _percent(
                    max(
                        (
                            s["gap"]
                            for s in fit.students
                            if s["depth"] == d and s["start"] == start and s["gap"] is not None
                        ),
                        default=None,
                    )
                )
                for start in starts
            )
            for d in fit.depths
        ]
        lines.append(f"gap of each start ({'/'.join(starts)}, worst replicate): " + ", ".join(gaps))
    if fit.stopped:
        lines.append(
            "stopped behind the leading start (gap then): "
            + ", ".join(_stopped_label(fit, d) for d in sorted({s["depth"] for s in fit.stopped}))
        )
    if any(loss is not None for loss in fit.reference_losses):
        reference = ", ".join("—" if loss is None else f"{loss:.2e}" for loss in fit.reference_losses)
        exponent = "" if fit.reference_alpha is None else f": α {fit.reference_alpha:.2f}"
        lines.append(f"untrained discretisation {reference}{exponent}")
    if any(ratio is not None for ratio in fit.test_over_train):
        lines.append(
            "test/train loss (largest replicate): "
            + ", ".join(
                f"ℓ={d} {'—' if ratio is None else f'{ratio:.2f}'}" for d, ratio in zip(fit.depths, fit.test_over_train)
            )
        )
    if fit.mismatch_alpha is not None:
        lines.append(
            f"α in the step mismatch 1/ℓ − 1/{fit.teacher_depth}: {fit.mismatch_alpha:.2f} "
            f"[{fit.mismatch_alpha_low:.2f}, {fit.mismatch_alpha_high:.2f}] (the verdict uses the log–log α)"
        )
    return lines


def _span(labels: list[str]) -> str:
    """`3626` or `3626–5103`: the first and last of labels already in order."""
    return labels[0] if labels[0] == labels[-1] else f"{labels[0]}–{labels[-1]}"


def _stopped_label(fit: DepthFit, depth: int) -> str:
    """`ℓ=8 zero 3/3 at step 3626–5103, +52%–80%`: the starts of one depth that raced and lost."""
    stopped = [s for s in fit.stopped if s["depth"] == depth]
    starts = "/".join(sorted({s["start"] for s in stopped}))
    steps = [str(step) for step in sorted(s["step"] for s in stopped)]
    gaps = [f"{gap:.0%}" for gap in sorted(s["behind_by"] for s in stopped)]
    return f"ℓ={depth} {starts} {len(stopped)}/{fit.replicates} at step {_span(steps)}, +{_span(gaps)}"


def window_label(fit: DepthFit) -> str:
    """α's range over depth windows, a second uncertainty beside the interval (empty below 3 depths)."""
    if fit.window_alpha_min is None:
        return ""
    return f"{fit.window_alpha_min:.2f}–{fit.window_alpha_max:.2f}"


def convergence_note(protocol, run_path="RUN", fitting_samples: bool = False, budget_moved: bool = False) -> str:
    """The footer line for a table with uncertified rows: what their α means and the command
    that fixes it (`fitting_samples`: some fitted student tests well above its training loss;
    `budget_moved`: some fitted student moved beyond its noise when its polish ran twice as long)."""
    config = protocol.config
    command = f"toymodels run --config {run_path}/config.json"
    budget = f"--steps {config.steps if config.converge else max(10 * config.steps, 40_000)}"
    outside = {REFERENCE_START, TRAINED_START} & set(config.starts)  # a reference outside the students' own curves
    starts = "" if outside else f" --start {','.join((*config.starts, REFERENCE_START))}"
    if protocol.loss.uses_temperature and TRAINED_START not in config.starts:
        # peaked (low-T) targets stall both from zero and from the discretised flow: fig3b's students at
        # T ≤ 0.05 sat up to 2.75× above the same teachers' MSE-trained students read out at T
        remedy = (
            f"train the layers on the read-outs (MSE) first, which low-temperature targets stall short of, "
            f"then to convergence from there (the certified preset's protocol): `{command} --converge "
            f"{budget} --pretrain-loss mse --start {TRAINED_START}`"
        )
    elif not config.converge:
        remedy = (
            f"train to convergence: `{command} --converge {budget}{starts}` (a budget: students stop as they converge)"
        )
    elif starts:  # converged, perhaps, but nothing outside their own curves says they are at their best
        remedy = f"train from the teacher's discretised flow too: `{command}{starts}`"
    elif fitting_samples:  # a pool reused too often: relabel it more often, or draw fresh samples
        refresh = f"--pool-refresh {max(1, config.pool_refresh // 4)}" if config.pool_refresh else "--teacher-pool 0"
        remedy = f"students fit their teacher samples; relabel the pool more often: `{command} {refresh}`"
    elif budget_moved:  # the plateau test stopped them while they could still fall: a longer window, a longer cap
        remedy = (
            f"twice the budget still moved them ({run_path}/{RunFolder.BUDGET_CSV}); lengthen the plateau window "
            f"(check_every {2 * config.check_every} in its config.json) and the budget: "
            f"`{command} --steps {2 * config.steps}`"
        )
    else:
        remedy = f"the budget capped them; raise it: `{command} --steps {2 * config.steps}`"
    return f"not certified: their α's are lower bounds; {remedy}"


def aligned_columns(header: list[str], rows: list[list[str]]) -> list[str]:
    """The header and rows as lines of left-aligned columns."""
    widths = [max(len(row[i]) for row in [header] + rows) for i in range(len(header))]
    return ["  ".join(cell.ljust(w) for cell, w in zip(cells, widths)).rstrip() for cells in [header] + rows]


def fit_window_line(min_depth: int, max_depth: int | None, source: str) -> str:
    """Which depths a fit read, and who chose them (`source`); empty when it read them all."""
    if min_depth <= 1 and max_depth is None:
        return ""
    window = " and ".join(
        bound
        for bound in (f"ℓ ≥ {min_depth}" if min_depth > 1 else "", f"ℓ ≤ {max_depth}" if max_depth else "")
        if bound
    )
    return f"fit window: {window} ({source})"


def format_table(fits: list[DepthFit], protocol, run_path="RUN", window: str = "") -> str:
    """One line per fit, and what a reader must know before trusting it (flags) indented below, one
    a line: the table stays about 120 columns wide. `run_path` names the run in the commands it
    suggests; `window` (`fit_window_line`) says which depths were fitted."""
    depths = sorted({d for fit in fits for d in fit.depths})
    header = ["teacher", "T"] + [f"ℓ={d}" for d in depths] + ["α_ℓ", "95% interval", "windows", "gap", "regime"]
    rows = []
    for fit in fits:
        loss_at = dict(zip(fit.depths, fit.losses))
        rows.append(
            [short_name(fit.teacher), temperature_label(fit.temperature)]
            + [f"{loss_at[d]:.3e}" if d in loss_at else "" for d in depths]
            + [
                f"{fit.alpha:.2f}",
                f"[{fit.alpha_low:.2f}, {fit.alpha_high:.2f}]",
                window_label(fit),
                _percent(fit.max_gap),
                fit.regime.partition(" (")[0],
            ]
        )  # why undetermined, a long text, goes on a flag line
    header_line, *lines = aligned_columns(header, rows)
    text = [header_line]
    for fit, line in zip(fits, lines):
        text.append(line)
        text.extend(f"    {flag}" for flag in fit_flags(fit))
    text.append("final test loss (geometric mean over replicates); α_ℓ: mean of the replicates' log–log slopes")
    text.append(
        f"95% interval: {'; '.join(sorted({fit.interval for fit in fits}))}; windows: min–max α over "
        f"every run of ≥ 3 neighbouring fitted depths"
    )
    text.append(
        f"gap: the largest optimisation gap of a fitted student, its loss over the best any start reached "
        f"on its teacher at its depth (the untrained discretisation included) − 1; certified: flattened, "
        f"gap ≤ {GAP_TOLERANCE:.0%} and "
        + (
            f"test/train ≤ {1 + FIT_TOLERANCE:g}"
            if protocol.config.teacher_pool
            else "fresh samples (test/train is the test set's noise)"
        )
    )
    if not all(fit.certified for fit in fits):
        fitted = [s for fit in fits for s in fit.students if s["fitted"]]
        text.append(
            convergence_note(
                protocol,
                run_path,
                fitting_samples=any(s.get("fits_its_data") for s in fitted),
                budget_moved=not all(s.get("budget_certified", True) for s in fitted),
            )
        )
    if window:
        text.append(window)
    deeper = [depth for depth in depths if depth > protocol.config.teacher_depth]
    if deeper:
        text.append(
            f"{', '.join(f'ℓ={depth}' for depth in deeper)}: deeper than the teacher ({protocol.config.teacher_depth} "
            f"layers), a student with more steps than the flow it learns; its discretised start splits the teacher's "
            f"layers, and the step mismatch 1/ℓ − 1/ℓ* is negative there"
        )
    text.append(f"protocol: {protocol_line(protocol)}")
    return "\n".join(text)


def fit_document(fits: list[DepthFit], protocol, min_depth: int = 1, max_depth: int | None = None) -> dict:
    """Everything `toymodels fit --json` prints: the protocol, the depth window fitted and each fit,
    α over training included."""
    return {
        "protocol": {**vars(protocol.config), "summary": protocol_line(protocol)},
        "window": {"min_depth": min_depth, "max_depth": max_depth},
        "fits": [f.as_dict() for f in fits],
    }


def comparison_table(fits_by_label: dict[str, list[DepthFit]], protocol) -> str:
    """The fits of runs that differ only in their students (`fits_by_label`, e.g. Euler then LNS),
    one line per run and group, and for two runs their difference: the second's replicate slopes
    minus the first's, teacher by teacher (the same protocol and seed train both on the same
    teachers), with its 95 % t-interval — the answer to "does the architecture change α?"."""
    labels = list(fits_by_label)
    by_label = {label: {fit.group: fit for fit in fits} for label, fits in fits_by_label.items()}
    header = ["teacher", "T", "students", "α_ℓ", "95% interval", "replicates", "gap", "certified", "regime"]
    rows = []
    for group in dict.fromkeys(fit.group for fits in fits_by_label.values() for fit in fits):
        present = [(label, by_label[label][group]) for label in labels if group in by_label[label]]
        for label, fit in present:
            rows.append(
                [
                    short_name(fit.teacher),
                    temperature_label(fit.temperature),
                    label,
                    f"{fit.alpha:.2f}",
                    f"[{fit.alpha_low:.2f}, {fit.alpha_high:.2f}]",
                    " ".join(f"{a:.2f}" for a in fit.replicate_alphas),
                    _percent(fit.max_gap),
                    "yes" if fit.certified else "no: a lower bound",
                    fit.regime.partition(" (")[0],
                ]
            )
        if (
            len(present) == 2
            and len({len(fit.replicate_alphas) for _, fit in present}) == 1
            and len(present[0][1].replicate_alphas) >= 2
        ):
            (first, a), (second, b) = present
            differences = np.subtract(b.replicate_alphas, a.replicate_alphas)
            half = t_half_width(differences)
            rows.append(
                [
                    "",
                    "",
                    f"Δα: {second} − {first}",
                    f"{differences.mean():+.2f}",
                    f"[{differences.mean() - half:+.2f}, {differences.mean() + half:+.2f}]",
                    " ".join(f"{d:+.2f}" for d in differences),
                    "",
                    "" if a.certified and b.certified else "no: bounds only",
                    "",
                ]
            )
    return "\n".join(
        aligned_columns(header, rows)
        + [
            "α_ℓ: mean of the replicates' log–log slopes, 95% t over teacher replicates; Δα: paired teacher by teacher",
            f"protocol (the same but for the students): {protocol_line(protocol)}",
        ]
    )


def gap_rows(gaps: pd.DataFrame) -> tuple[list[str], list[list[str]]]:
    """The header and rows of a `gaps_to_optimum` table: per teacher replicate, each depth's loss
    beside its certified optimum's and the lower of the two (the best either reached), then the
    three log–log α over those depths."""
    header = ["teacher", "T", "replicate", "depth", "loss", "optimum", "optimum's start", "gap", "best of both"]
    rows = []
    for (teacher, _, replicate), pairs in gaps.groupby(
        ["teacher", "temperature", "replicate"], dropna=False, sort=False
    ):
        temperature = temperature_label(pairs["temperature"].iloc[0])
        for pair in pairs.itertuples():
            rows.append(
                [
                    teacher,
                    temperature,
                    str(replicate),
                    str(pair.depth),
                    f"{pair.test_loss:.3g}",
                    f"{pair.optimum_loss:.3g}" + ("" if pair.optimum_certified else " (uncertified)"),
                    pair.optimum_start,
                    _percent(pair.gap),
                    f"{min(pair.test_loss, pair.optimum_loss):.3g}",
                ]
            )
        if len(pairs) >= 2:
            best = np.fmin(pairs["test_loss"], pairs["optimum_loss"])
            alphas = [
                fit_power_law(pairs["depth"], losses)[0] for losses in (pairs["test_loss"], pairs["optimum_loss"], best)
            ]
            rows.append(
                [
                    teacher,
                    temperature,
                    str(replicate),
                    "α",
                    f"{alphas[0]:.2f}",
                    f"{alphas[1]:.2f}",
                    "",
                    "",
                    f"{alphas[2]:.2f}",
                ]
            )
    return header, rows


def gap_table(gaps: pd.DataFrame, optimum: str) -> str:
    """`gap_rows` for the terminal and the run folder; `optimum` names the certified run."""
    header, rows = gap_rows(gaps)
    return "\n".join(
        aligned_columns(header, rows)
        + [
            f"optimum: the fitted (best, certified) student of {optimum} on the same teacher at that depth; "
            "gap: loss / optimum − 1 (negative: this run went below the certified loss, which is then no optimum); "
            "best of both: the lower loss; α: log–log slope over the depths above"
        ]
    )
