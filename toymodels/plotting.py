"""Figures of a run: loss against depth with the fitted power laws, α against temperature,
α against training step. Each is made from the run folder's data and names its protocol."""

import math
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import seaborn as sns

from .fitting import DepthFit
from .plotting_style import add_caption, apply_style, save_figure
from .report import protocol_line


def _label(fit: DepthFit) -> str:
    temperature = "" if math.isnan(fit.temperature) else f"T={fit.temperature:.3g}: "
    mark = "" if fit.converged else " *"
    return f"{temperature}α={fit.alpha:.2f} [{fit.alpha_low:.2f}, {fit.alpha_high:.2f}]{mark}"


def _by_teacher(fits):
    teachers = sorted({f.teacher for f in fits})
    return teachers, {t: [f for f in fits if f.teacher == t] for t in teachers}


def _temperature_colours(fits):
    temperatures = sorted({f.temperature for f in fits if not math.isnan(f.temperature)})
    palette = sns.color_palette("viridis", max(len(temperatures), 1))
    return lambda t: "0.2" if math.isnan(t) else palette[temperatures.index(t)]


def plot_loss_vs_depth(fits: list[DepthFit], protocol: str, path) -> list[Path]:
    apply_style()
    teachers, groups = _by_teacher(fits)
    colour = _temperature_colours(fits)
    fig, axes = plt.subplots(1, len(teachers), figsize=(4.6 * len(teachers), 3.9), squeeze=False, sharey=True)
    for ax, teacher in zip(axes[0], teachers):
        for fit in groups[teacher]:
            depths = np.array(fit.depths)
            slope, intercept = np.polyfit(np.log(depths), np.log(fit.losses), 1)
            grid = np.geomspace(depths.min(), depths.max(), 50)
            ax.plot(grid, np.exp(intercept) * grid**slope, color=colour(fit.temperature), lw=1.2, alpha=0.8)
            ax.plot(depths, fit.losses, "o", color=colour(fit.temperature), ms=4.5, label=_label(fit))
        ax.set(xscale="log", yscale="log", xlabel="student depth ℓ", title=f"{teacher} teacher")
        ax.set_xticks(groups[teacher][0].depths, [str(d) for d in groups[teacher][0].depths])
        ax.minorticks_off()
        ax.legend(fontsize=7, loc="best")
    axes[0][0].set_ylabel("final test loss")
    add_caption(fig, f"{protocol}.  * not converged")
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    return save_figure(fig, path)


def plot_alpha_vs_temperature(fits: list[DepthFit], protocol: str, path) -> list[Path]:
    apply_style()
    teachers, groups = _by_teacher(fits)
    fig, ax = plt.subplots(figsize=(5, 3.8))
    for teacher, colour in zip(teachers, sns.color_palette("deep")):
        group = sorted(groups[teacher], key=lambda f: f.temperature)
        t = np.array([f.temperature for f in group])
        alpha = np.array([f.alpha for f in group])
        error = np.array([[f.alpha - f.alpha_low, f.alpha_high - f.alpha] for f in group]).T
        ax.errorbar(t, alpha, yerr=error, fmt="o-", color=colour, capsize=3, ms=4, label=f"{teacher} teacher")
    for level, name in ((1, "ensemble"), (3, "procedural")):
        ax.axhline(level, color="0.6", ls=":", lw=1)
        ax.text(ax.get_xlim()[1], level, f" {name}", va="center", fontsize=7, color="0.4")
    ax.set(xscale="log", xlabel="temperature T", ylabel="depth exponent α_ℓ (95 % interval)")
    ax.legend()
    add_caption(fig, protocol)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return save_figure(fig, path)


def plot_alpha_vs_step(fits: list[DepthFit], protocol: str, path) -> list[Path]:
    apply_style()
    teachers, groups = _by_teacher(fits)
    colour = _temperature_colours(fits)
    fig, axes = plt.subplots(1, len(teachers), figsize=(4.6 * len(teachers), 3.6), squeeze=False, sharey=True)
    for ax, teacher in zip(axes[0], teachers):
        for fit in groups[teacher]:
            steps, alphas = zip(*fit.alpha_over_training)
            label = "" if math.isnan(fit.temperature) else f"T={fit.temperature:.3g}"
            ax.plot(steps, alphas, "-", color=colour(fit.temperature), lw=1.4, label=label or None)
        ax.axhline(1, color="0.6", ls=":", lw=1)
        ax.axhline(3, color="0.6", ls=":", lw=1)
        ax.set(xscale="log", xlabel="training step", title=f"{teacher} teacher")
        if any(not math.isnan(f.temperature) for f in groups[teacher]):
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("α_ℓ fitted at that step")
    add_caption(fig, protocol)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    return save_figure(fig, path)


def plot_run(fits: list[DepthFit], config, out_dir) -> list[Path]:
    """All figures of a run into `out_dir`; returns the files written."""
    out_dir = Path(out_dir)
    protocol = protocol_line(config)
    paths = plot_loss_vs_depth(fits, protocol, out_dir / "loss_vs_depth")
    paths += plot_alpha_vs_step(fits, protocol, out_dir / "alpha_vs_step")
    if any(not math.isnan(f.temperature) for f in fits):
        paths += plot_alpha_vs_temperature(fits, protocol, out_dir / "alpha_vs_temperature")
    return paths
