"""Figures of a run: loss against depth with the fitted power laws, α against temperature,
α against training step or budget. Each is made from the run folder's data and names its protocol."""

import math
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib import ticker
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.transforms import offset_copy

from ..registry import short_name
from ..results.depth_fit import DepthFit
from ..results.exponents import fit_power_law, mismatch_constant, step_mismatch
from ..results.report import parameter_map, slope_columns
from .style import ALPHA, draw_regime_lines, figure_style, finish_figure, new_figure

_ALPHA_LABEL = f"depth exponent {ALPHA} (95 % interval)"


def _unconverged_key(fits) -> str:
    """The caption's key for the * that marks uncertified fits (lower bounds), when any is."""
    return "" if all(f.certified for f in fits) else ".  * not certified: α is a lower bound"


def _reference_key(fits) -> str:
    """The caption's key for the dashed references of a loss-against-depth panel, when it has them."""
    return (
        ".  Dashed, crosses: the untrained discretisation of the teacher's flow (the reference every "
        "student is certified against)"
        if any(_has_reference(f) for f in fits)
        else ""
    )


def _replicate_key(fits) -> str:
    return ".  Small dots: each teacher replicate's fitted student" if any(f.students for f in fits) else ""


# What the marks of the figures mean, in their legends: a reader of the image alone has no caption.
UNCERTIFIED_LABEL = "* not certified: α is a lower bound"
OPEN_LABEL = "open: not certified (α a lower bound)"
LOWER_BOUND_LABEL = OPEN_LABEL.replace("open", "open, ↑")
REPLICATE_LABEL = "small dots: each teacher replicate's student"
BAND_LABEL = "shaded: 95 % interval over the teachers"
DISCRETISATION_LABEL = "dashed, crosses: the teacher's untrained discretisation"
DISCRETISATION_MARKER = "x"  # open circles mean "not certified" in every figure


def _discretisation_label(fits) -> str:
    """The dashed reference's legend entry; it is also the students' start where a run starts from it."""
    starts = {s.get("start") for f in fits for s in f.students}
    return DISCRETISATION_LABEL + (" (the discretised start)" if "discretised" in starts else "")


def _key_handles(fits, colour="0.35") -> list:
    """Legend entries, without data, for the marks of a loss-against-depth panel that `fits` has:
    the dashed discretisation with crosses, the replicates' small dots, the * of an
    uncertified fit."""
    handles = []
    if any(_has_reference(f) for f in fits):
        handles.append(
            Line2D(
                [],
                [],
                ls="--",
                marker=DISCRETISATION_MARKER,
                color=colour,
                ms=4,
                lw=0.8,
                label=_discretisation_label(fits),
            )
        )
    if any(s.get("fitted") for f in fits for s in f.students):
        handles.append(Line2D([], [], ls="", marker=".", color=colour, ms=3, label=REPLICATE_LABEL))
    if not all(f.certified for f in fits):
        handles.append(Line2D([], [], ls="", marker="", label=UNCERTIFIED_LABEL))
    return handles


def _has_reference(fit: DepthFit) -> bool:
    return bool(fit.reference_losses) and all(loss is not None and loss > 0 for loss in fit.reference_losses)


def _label(fit: DepthFit) -> str:
    temperature = "" if math.isnan(fit.temperature) else f"T={fit.temperature:.3g}: "
    if fit.certified:
        status = ", certified" if fit.students else ""  # fits older than certificates: converged only
    else:
        status = (f", gap {fit.max_gap:.0%}" if fit.max_gap else "") + " *"
    return f"{temperature}α={fit.alpha:.2f} [{fit.alpha_low:.2f}, {fit.alpha_high:.2f}]{status}"


def _interval_errors(fits) -> np.ndarray:
    """α's 95 % intervals as the (below, above) distances errorbar takes."""
    return np.array([[f.alpha - f.alpha_low, f.alpha_high - f.alpha] for f in fits]).T


def _by_teacher(fits):
    teachers = sorted({f.teacher for f in fits})
    return teachers, {t: [f for f in fits if f.teacher == t] for t in teachers}


def _temperature_colours(fits):
    temperatures = sorted({f.temperature for f in fits if not math.isnan(f.temperature)})
    palette = sns.color_palette("viridis", max(len(temperatures), 1))
    return lambda t: "0.2" if math.isnan(t) else palette[temperatures.index(t)]


def _alpha_curve(points) -> np.ndarray:
    """Rows step, α, low, high of an α-over-training list (NaN bounds from fit.json files older than them)."""
    return np.array([(*point, math.nan, math.nan)[:4] for point in points], float).T


def _plot_fit(ax, fit: DepthFit, colour, label):
    """Final losses as dots and the fitted power law as a line."""
    depths = np.array(fit.depths)
    slope, intercept = np.polyfit(np.log(depths), np.log(fit.losses), 1)
    grid = np.geomspace(depths.min(), depths.max(), 50)
    ax.plot(grid, np.exp(intercept) * grid**slope, color=colour, lw=1.2, alpha=0.85)
    ax.plot(depths, fit.losses, "o", color=colour, ms=4.5, label=label)
    replicates = [(s["depth"], s["test_loss"]) for s in fit.students if s.get("fitted") and s["depth"] in fit.depths]
    if replicates:  # the spread the interval comes from
        ax.plot(*zip(*replicates), ".", color=colour, ms=3, alpha=0.5)
    if _has_reference(fit):
        ax.plot(
            depths, fit.reference_losses, ls="--", marker=DISCRETISATION_MARKER, color=colour, ms=4, lw=0.8, alpha=0.7
        )


def _depth_axes(ax, fits):
    """Log–log axes with the student depths as ticks and readable loss labels."""
    ax.set(xscale="log", yscale="log", xlabel="student depth ℓ")
    ticks = sorted({d for f in fits for d in f.depths})
    ax.set_xticks(ticks, [str(d) for d in ticks])
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    ax.yaxis.set_minor_formatter(ticker.LogFormatterSciNotation(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def _legend_below(ax, fontsize, fits=()):
    """Under the axes: with the dashed references and several temperatures no corner is free of lines.
    After the fits' own entries, the key of the marks `fits` show (`_key_handles`)."""
    handles, _ = ax.get_legend_handles_labels()
    ax.legend(
        handles=handles + _key_handles(fits),
        fontsize=fontsize,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.22),
        frameon=False,
    )


def _draw_band(ax, steps, lows, highs, colour) -> bool:
    """α's 95 % interval at each step as a shaded band, where the fit gives one (not with one
    teacher, nor in fit.json files older than the interval); whether it drew one."""
    shown = np.isfinite(lows) & np.isfinite(highs)
    if not shown.any():
        return False
    ax.fill_between(steps, np.where(shown, lows, np.nan), np.where(shown, highs, np.nan), color=colour, alpha=0.2, lw=0)
    return True


def _panel_per_teacher(fits, height):
    """A row of axes, one per teacher, with the fits of each and a colour per temperature."""
    teachers, groups = _by_teacher(fits)
    fig, axes = new_figure((4.6 * len(teachers), height), 1, len(teachers), squeeze=False, sharey=True)
    return (
        fig,
        axes[0],
        [(ax, teacher, groups[teacher]) for ax, teacher in zip(axes[0], teachers)],
        _temperature_colours(fits),
    )


@figure_style()
def plot_loss_vs_depth(fits: list[DepthFit], protocol: str, path) -> list[Path]:
    fig, axes, panels, colour = _panel_per_teacher(fits, 3.9)
    for ax, teacher, group in panels:
        for fit in group:
            _plot_fit(ax, fit, colour(fit.temperature), _label(fit))
        _depth_axes(ax, group)
        ax.set_title(f"{short_name(teacher)} teacher")
        _legend_below(ax, fontsize=7, fits=group)
    axes[0].set_ylabel("final test loss")
    return finish_figure(fig, protocol + _unconverged_key(fits) + _reference_key(fits) + _replicate_key(fits), path)


@figure_style()
def plot_alpha_vs_temperature(fits: list[DepthFit], protocol: str, path) -> list[Path]:
    """α against T, a line per teacher: a certified α as a filled circle, one that is not (a lower
    bound: some fitted student had not converged) as an open circle with an arrow up."""
    teachers, groups = _by_teacher(fits)
    fig, ax = new_figure((5, 3.8))
    handles = []
    for teacher, colour in zip(teachers, sns.color_palette("deep")):
        group = sorted(groups[teacher], key=lambda f: f.temperature)
        t = np.array([f.temperature for f in group])
        alpha = np.array([f.alpha for f in group])
        certified = np.array([f.certified for f in group])
        ax.errorbar(t, alpha, yerr=_interval_errors(group), fmt="-", color=colour, capsize=3)
        ax.plot(t[certified], alpha[certified], "o", color=colour, ms=5, ls="")
        ax.plot(t[~certified], alpha[~certified], "o", color=colour, mfc="white", ms=5, ls="", zorder=3)
        for temperature, bound in zip(t[~certified], alpha[~certified]):  # α lies above: the arrow points there,
            # beside the interval's bar
            ax.annotate(
                "",
                xy=(temperature, bound),
                xycoords=offset_copy(ax.transData, fig, 7, 16, units="points"),
                xytext=(temperature, bound),
                textcoords=offset_copy(ax.transData, fig, 7, 0, units="points"),
                arrowprops=dict(arrowstyle="-|>", color=colour, lw=1.2, shrinkA=0, shrinkB=0),
                annotation_clip=False,
            )
        handles.append(Line2D([], [], marker="o", color=colour, ms=5, label=f"{short_name(teacher)} teacher"))
    if not all(f.certified for f in fits):
        handles.append(Line2D([], [], marker="o", mfc="white", color="0.35", ms=5, ls="", label=LOWER_BOUND_LABEL))
    draw_regime_lines(ax)
    ax.set(xscale="log", xlabel="temperature T", ylabel=_ALPHA_LABEL)
    ax.legend(handles=handles, fontsize=8)
    return finish_figure(fig, protocol, path)


TRAP_START = "zero"  # the paper's start: its α against step is the curve an undertrained sweep reads off
TRAP_NOTE = (
    f".  Solid: α of the {TRAP_START}-start students alone at each step; dashed: the certified α that "
    "curve should reach (the best start's converged students)"
)


def _trap_curve(fit: DepthFit):
    """The zero-start students' α against step, when the run has other starts to certify it against."""
    return fit.start_alphas_over_training.get(TRAP_START) if fit.certified else None


@figure_style()
def plot_alpha_vs_step(fits: list[DepthFit], protocol: str, path) -> list[Path]:
    """α_ℓ against training step, one panel per teacher and a colour per temperature. In a run
    with several starts and a certified fit, the zero start's curve beside the certified α it
    should reach (dashed): the trap, measured; otherwise the best start's curve, ending in an open
    circle where the fit is not certified (a lower bound)."""
    fig, axes, panels, colour = _panel_per_teacher(fits, 3.6)
    for ax, teacher, group in panels:
        banded = traps = bounds = False
        for fit in group:
            trap = _trap_curve(fit)
            steps, alphas, lows, highs = _alpha_curve(trap or fit.alpha_over_training)
            label = "" if math.isnan(fit.temperature) else f"T={fit.temperature:.3g}"
            ax.plot(steps, alphas, "-", color=colour(fit.temperature), lw=1.4, label=label or None)
            banded |= _draw_band(ax, steps, lows, highs, colour(fit.temperature))
            if not fit.certified and len(steps):  # where the curve ends is a lower bound, as on every figure
                ax.plot(steps[-1:], alphas[-1:], "o", color=colour(fit.temperature), mfc="white", ms=5, zorder=3)
                bounds = True
            if trap:
                ax.axhline(fit.alpha, color=colour(fit.temperature), ls="--", lw=1)
                traps = True
        ax.set(xscale="log", xlabel="training step", title=f"{short_name(teacher)} teacher")
        handles, _ = ax.get_legend_handles_labels()
        if banded:
            handles.append(Patch(color="0.35", alpha=0.2, lw=0, label=BAND_LABEL))
        if traps:
            handles.append(Line2D([], [], ls="--", lw=1, color="0.35", label="dashed: the certified α"))
        if bounds:
            handles.append(Line2D([], [], marker="o", mfc="white", color="0.35", ms=5, ls="", label=OPEN_LABEL))
        if handles:
            ax.legend(handles=handles, fontsize=7)
    for ax in axes:  # once every panel's data is in: the shared axis fits all of it
        draw_regime_lines(ax)
    axes[0].set_ylabel(f"{ALPHA} fitted at that step (95 %)")
    note = TRAP_NOTE if any(_trap_curve(f) for f in fits) else ""
    return finish_figure(fig, protocol + note, path)


BUDGET_NOTE = (
    ".  Each point is the sweep as a run capped at that many steps ends it: the rate is constant "
    "between the plateau test's decays and the test looks only back, so a capped run trains identically "
    "up to its cap (students converged earlier keep their final loss)"
)


@figure_style()
def plot_alpha_vs_budget(fits: list[DepthFit], caption: str, path) -> list[Path]:
    """α_ℓ with its 95 % band against the training budget, one panel per teacher: the trap (an
    undertrained sweep reads as α ≈ 1) measured. Only for protocols that train at a constant rate
    (see BUDGET_NOTE); the dotted line is the step by which every student had stopped."""
    fig, axes, panels, colour = _panel_per_teacher(fits, 3.8)
    for ax, teacher, group in panels:
        for fit in group:
            steps, alphas, lows, highs = _alpha_curve(fit.alpha_over_training)
            shade = colour(fit.temperature)
            ax.plot(steps, alphas, "-", color=shade, lw=1.5, label=_label(fit))
            ax.fill_between(steps, lows, highs, color=shade, alpha=0.2, lw=0)
            ax.axvline(fit.steps, color=shade, ls=":", lw=1)
        ax.set(xscale="log", xlabel="training budget (steps)", title=f"{teacher} teacher")
        ax.legend(fontsize=7, loc="center left")
    for ax in axes:
        draw_regime_lines(ax)
    axes[0].set_ylabel(f"{ALPHA} of the sweep capped there (95 %)")
    return finish_figure(fig, caption + BUDGET_NOTE + _unconverged_key(fits), path)


@figure_style()
def plot_regimes(fits: list[DepthFit], caption: str, path) -> list[Path]:
    """The headline: every (teacher, temperature) on one loss-against-depth axis with its fitted
    power law, beside α against training step; reference lines at the two regimes."""
    fig, (depth_ax, time_ax) = new_figure((10, 4.1), 1, 2)
    palette = dict(zip(sorted({f.teacher for f in fits}), sns.color_palette("deep")))
    banded = False
    for fit in fits:
        name = fit.teacher if math.isnan(fit.temperature) else f"{fit.teacher}, T={fit.temperature:.3g}"
        _plot_fit(depth_ax, fit, palette[fit.teacher], f"{name}: {_label(fit)}")
        steps, alphas, lows, highs = _alpha_curve(fit.alpha_over_training)
        time_ax.plot(steps, alphas, "-", color=palette[fit.teacher], lw=1.6, label=name)
        banded = _draw_band(time_ax, steps, lows, highs, palette[fit.teacher]) or banded
    _depth_axes(depth_ax, fits)
    depth_ax.set(ylabel="final test loss", title="loss against depth")
    _legend_below(depth_ax, fontsize=7.5, fits=fits)
    draw_regime_lines(time_ax)
    time_ax.set(
        xscale="log", xlabel="training step", ylabel=f"{ALPHA} fitted at that step", title=f"{ALPHA} during training"
    )
    handles, _ = time_ax.get_legend_handles_labels()
    time_ax.legend(
        handles=handles + [Patch(color="0.35", alpha=0.2, lw=0, label=BAND_LABEL)] * banded,
        fontsize=7.5,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.22),
        frameon=False,
    )
    return finish_figure(fig, caption + _unconverged_key(fits) + _reference_key(fits) + _replicate_key(fits), path)


@figure_style()
def plot_alpha_vs_parameter(fits: list[DepthFit], parameter: str, caption: str, path) -> list[Path]:
    """α_ℓ against a parameter of the teacher dynamics (e.g. ρ of `correlated(rho=…)`), with the
    local slope of each depth window (ℓ → 2ℓ) as its own curve: where α leaves the ensemble law,
    and whether that place moves with depth. Open grey: the untrained discretisation's α."""
    table = parameter_map(fits, parameter)
    values = table[parameter].to_numpy()
    fig, ax = new_figure((5.6, 3.8))
    ax.errorbar(
        values,
        table.alpha,
        yerr=[table.alpha - table.alpha_low, table.alpha_high - table.alpha],
        fmt="o-",
        capsize=3,
        ms=5,
        color="0.15",
        label=f"{ALPHA}, fitted window",
        zorder=3,
    )
    uncertified = ~table.certified.astype(bool).to_numpy()
    if uncertified.any():  # a lower bound: open, over the filled circle
        ax.plot(
            values[uncertified],
            table.alpha[uncertified],
            "o",
            ms=5,
            color="0.15",
            mfc="white",
            zorder=4,
            label=OPEN_LABEL,
        )
    windows = slope_columns(table)
    for (column, window), colour in zip(windows.items(), sns.color_palette("viridis", len(windows))):
        measured = table[[parameter, column]].dropna()
        ax.plot(
            measured[parameter], measured[column], "s--", ms=3.5, lw=1, color=colour, label=f"local slope ℓ {window}"
        )
    references = table[[parameter, "untrained_alpha"]].dropna()
    if len(references):
        ax.plot(
            references[parameter],
            references.untrained_alpha,
            DISCRETISATION_MARKER,
            color="0.55",
            ms=5,
            label="untrained discretisation",
        )
    draw_regime_lines(ax)
    ax.set(xlabel={"rho": "ρ, the correlation of the teacher's layers"}.get(parameter, parameter), ylabel=_ALPHA_LABEL)
    ax.legend(fontsize=7)
    return finish_figure(fig, caption + _unconverged_key(fits), path)


@figure_style()
def plot_step_mismatch(fits: list[DepthFit], caption: str, path) -> list[Path]:
    """Loss against ℓ toward the teacher's depth ℓ*, trained and untrained, each with the pure
    step-mismatch law c·(1/ℓ − 1/ℓ*)² fitted to it (one constant); below, how many times the
    trained students beat the discretisation at each depth: a flat line means by the same factor
    as ℓ nears ℓ*, a rising one by more."""
    fits = [f for f in fits if f.teacher_depth and _has_reference(f)]
    if not fits:
        return []
    teachers, groups = _by_teacher(fits)
    colour = _temperature_colours(fits)
    fig, axes = new_figure(
        (4.8 * len(teachers), 6.2), 2, len(teachers), squeeze=False, sharex="col", height_ratios=[2.2, 1]
    )
    for (loss_ax, ratio_ax), teacher in zip(axes.T, teachers):
        for fit in groups[teacher]:
            depths, teacher_depth = np.array(fit.depths), fit.teacher_depth
            grid = np.geomspace(depths.min(), teacher_depth * 0.98, 80)
            for losses, what, line, face in (
                (fit.losses, "trained", "-", None),
                (fit.reference_losses, "untrained discretisation", "--", "none"),
            ):
                constant = mismatch_constant(depths, losses, teacher_depth)
                loss_ax.plot(
                    grid,
                    constant * step_mismatch(grid, teacher_depth) ** 2,
                    ls=line,
                    lw=1,
                    color=colour(fit.temperature),
                )
                loss_ax.plot(
                    depths,
                    losses,
                    "o",
                    ms=4.5,
                    mfc=face,
                    color=colour(fit.temperature),
                    label=f"{what}: c = {constant:.3g}",
                )
            ratio = np.array(fit.reference_losses) / np.array(fit.losses)
            ratio_ax.plot(depths, ratio, "o-", ms=4, color=colour(fit.temperature))
        for ax in (loss_ax, ratio_ax):
            ax.axvline(teacher_depth, color="0.55", ls=":", lw=1)
        loss_ax.text(
            teacher_depth,
            1,
            " ℓ*: the teacher",
            transform=loss_ax.get_xaxis_transform(),
            fontsize=7,
            color="0.35",
            ha="right",
            va="bottom",
        )
        _depth_axes(loss_ax, groups[teacher])
        measured = [loss for f in groups[teacher] for loss in (*f.losses, *f.reference_losses)]
        loss_ax.set_ylim(min(measured) / 30, max(measured) * 3)  # the law falls to 0 at ℓ*: show where data is
        ticks = sorted({d for f in groups[teacher] for d in f.depths} | {teacher_depth})
        ratio_ax.set_xticks(ticks, [str(d) for d in ticks])
        loss_ax.set(title=f"{teacher} teacher", ylabel="final test loss", xlabel="")
        loss_ax.legend(fontsize=7)
        ratio_ax.set(ylim=(0, None), xlabel="student depth ℓ", ylabel="untrained / trained loss")
    return finish_figure(
        fig,
        caption + ".  Lines: c·(1/ℓ − 1/ℓ*)², c fitted (solid: trained students, dashed: "
        "the untrained discretisation); no free exponent" + _unconverged_key(fits),
        path,
    )


@figure_style()
def plot_gap_to_optimum(gaps: pd.DataFrame, run: str, optimum: str, caption: str, path) -> list[Path]:
    """Loss against ℓ of a run's students and of the certified optimum on the same teachers
    (`gaps_to_optimum`), each teacher replicate with its log–log α; below, loss / optimum per depth:
    where the run's training falls short, and whether it does so more at some depths."""
    if gaps.empty:
        return []
    teachers = list(dict.fromkeys(gaps["teacher"]))
    fig, axes = new_figure(
        (4.8 * len(teachers), 6.2), 2, len(teachers), squeeze=False, sharex="col", height_ratios=[2.2, 1]
    )
    for (loss_ax, ratio_ax), teacher in zip(axes.T, teachers):
        groups = gaps[gaps["teacher"] == teacher].groupby(["temperature", "replicate"], dropna=False)
        for ((temperature, replicate), pairs), colour in zip(groups, sns.color_palette("deep")):
            name = f"replicate {replicate}" + ("" if math.isnan(temperature) else f", T={temperature:.3g}")
            for losses, who, style, face in (
                (pairs["test_loss"], run, "o-", None),
                (pairs["optimum_loss"], optimum, "s--", "none"),
            ):
                alpha, _ = fit_power_law(pairs["depth"], losses)
                loss_ax.plot(
                    pairs["depth"],
                    losses,
                    style,
                    ms=4.5,
                    lw=1,
                    mfc=face,
                    color=colour,
                    label=f"{who}, {name}: α = {alpha:.2f}",
                )
            ratio_ax.plot(pairs["depth"], pairs["test_loss"] / pairs["optimum_loss"], "o-", ms=4, color=colour)
        depths = sorted(set(gaps["depth"]))
        for ax in (loss_ax, ratio_ax):
            ax.set(xscale="log", yscale="log")
            ax.set_xticks(depths, [str(d) for d in depths])
            ax.xaxis.set_minor_locator(ticker.NullLocator())
        ratio_ax.axhline(1, color="0.55", ls=":", lw=1)
        ratio_ax.yaxis.set_major_locator(ticker.LogLocator(subs=(1, 2, 5)))
        ratio_ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda ratio, _: f"{ratio:g}"))
        ratio_ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        loss_ax.set(title=f"{teacher} teacher", ylabel="final test loss")
        loss_ax.legend(fontsize=7)
        ratio_ax.set(xlabel="student depth ℓ", ylabel=f"loss / {optimum}")
    return finish_figure(
        fig,
        caption + f".  Beside each student, the fitted (certified) student of {optimum} on "
        "the same teacher at the same depth (open squares); below 1, this run went below it",
        path,
    )


@figure_style()
def plot_comparison(fits_by_label: dict[str, list[DepthFit]], caption: str, path) -> list[Path]:
    """α_ℓ of several runs side by side, per teacher (and temperature), with 95 % intervals."""
    groups = sorted({f.group for fits in fits_by_label.values() for f in fits}, key=lambda g: (g[0], g[1] or 0))
    fig, ax = new_figure((1.6 + 1.3 * len(groups), 3.8))
    width = 0.8 / len(fits_by_label)
    for k, ((label, fits), colour) in enumerate(zip(fits_by_label.items(), sns.color_palette("deep"))):
        by_group = {f.group: f for f in fits}
        present = [(x, by_group[g]) for x, g in enumerate(groups) if g in by_group]
        offset = (k - (len(fits_by_label) - 1) / 2) * width
        ax.errorbar(
            [x + offset for x, _ in present],
            [f.alpha for _, f in present],
            yerr=_interval_errors(f for _, f in present),
            fmt="o",
            capsize=3,
            color=colour,
            label=label,
        )
        bounds = [(x + offset, f.alpha) for x, f in present if not f.certified]
        if bounds:  # a lower bound: open
            ax.plot(*zip(*bounds), "o", color=colour, mfc="white", ls="", zorder=3)
    if not all(f.certified for fits in fits_by_label.values() for f in fits):
        ax.plot([], [], "o", color="0.35", mfc="white", ls="", label=OPEN_LABEL)
    ax.set_xticks(range(len(groups)), [t if temp is None else f"{t}\nT={temp:.3g}" for t, temp in groups])
    ax.set(ylabel=_ALPHA_LABEL, xlim=(-0.6, len(groups) - 0.4))
    draw_regime_lines(ax)
    ax.legend(fontsize=8)
    return finish_figure(fig, caption, path)


def plot_run(fits: list[DepthFit], caption: str, out_dir) -> list[Path]:
    """All figures of a run into `out_dir`, each captioned with the protocol; returns the files."""
    out_dir = Path(out_dir)
    paths = plot_loss_vs_depth(fits, caption, out_dir / "loss_vs_depth")
    paths += plot_alpha_vs_step(fits, caption, out_dir / "alpha_vs_step")
    if any(not math.isnan(f.temperature) for f in fits):
        paths += plot_alpha_vs_temperature(fits, caption, out_dir / "alpha_vs_temperature")
    return paths
