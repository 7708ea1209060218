"""The scaling law's figures: the depth term of the fit over the Chinchilla shapes, and α_ℓ of
LLMs beside the toy models' (analysis/scaling_law.py fits them)."""

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm

from ..analysis.scaling_law import ScalingLawFit, depth_part
from .style import draw_regime_lines, figure_style, finish_figure, new_figure


@figure_style()
def plot_depth_term(
    df: pd.DataFrame, fit: ScalingLawFit, path, *, drop_top: int, depth_offset: int, alpha_l_interval=None
) -> list:
    """The depth part of the loss against ℓ on log–log axes, with the fitted c_ℓ/ℓ^α_ℓ (as in the paper's Fig. 2f)."""
    part = depth_part(df, fit)
    shown = part > 0  # a log axis cannot show the few runs whose depth part is noise below zero
    fig, ax = new_figure((5.2, 4.0))
    points = ax.scatter(
        df.l[shown], part[shown], c=df.FLOP[shown], norm=LogNorm(), cmap="viridis", s=16, alpha=0.85, linewidths=0
    )
    fig.colorbar(points, ax=ax, label="training compute (FLOP)")
    depths = np.geomspace(df.l.min(), df.l.max(), 100)
    ax.plot(
        depths,
        fit.c_l * depths**-fit.alpha_l,
        color="crimson",
        lw=2,
        label=f"$c_\\ell/\\ell^{{\\alpha_\\ell}}$, $\\alpha_\\ell$ = {fit.alpha_l:.2f}",
    )
    ax.set(
        xscale="log",
        yscale="log",
        xlabel=f"ℓ = 100 · (layers − {depth_offset})" if depth_offset else "ℓ = 100 · layers",
        ylabel="L − width, data and floor terms",
    )
    ax.legend(loc="lower left")
    interval = (
        f"95 % bootstrap [{alpha_l_interval[0]:.2f}, {alpha_l_interval[1]:.2f}]"
        if alpha_l_interval
        else f"± {fit.stderr['alpha_l']:.2f} (Jacobian SE)"
    )
    hidden = f" {int((~shown).sum())} runs with a depth part ≤ 0 are not shown." if not shown.all() else ""
    return finish_figure(
        fig,
        f"Chinchilla shapes: {fit.n_rows} runs after dropping the K={drop_top} highest losses "
        f"(ties included), depth offset {depth_offset}; log-space least squares. "
        f"α_ℓ = {fit.alpha_l:.2f}, {interval}.{hidden}",
        path,
    )


@figure_style()
def plot_alpha_summary(llm_fit: ScalingLawFit, toy_alphas, path, llm_interval=None) -> list:
    """α_ℓ of the LLMs beside the toy models' (rows of label, alpha, lo, hi), against the two regimes' values."""
    toys = pd.DataFrame(toy_alphas, columns=["label", "alpha", "lo", "hi"])
    lo, hi = llm_interval or (
        llm_fit.alpha_l - 1.96 * llm_fit.stderr["alpha_l"],
        llm_fit.alpha_l + 1.96 * llm_fit.stderr["alpha_l"],
    )
    rows = pd.concat(
        [pd.DataFrame([{"label": "LLMs (Chinchilla)", "alpha": llm_fit.alpha_l, "lo": lo, "hi": hi}]), toys],
        ignore_index=True,
    )
    height = 1.6 + 0.45 * len(rows)
    fig, ax = new_figure((5.2, height))
    y = np.arange(len(rows))[::-1]
    colors = ["crimson"] + ["0.25"] * len(toys)
    ax.barh(y, rows.alpha, color=colors, alpha=0.35, height=0.6)
    ax.errorbar(rows.alpha, y, xerr=[rows.alpha - rows.lo, rows.hi - rows.alpha], fmt="o", color="0.1", capsize=3, ms=4)
    ax.set(
        yticks=y,
        yticklabels=rows.label,
        xlabel="depth exponent $\\alpha_\\ell$",
        xlim=(0, max(3.6, rows.hi.max() * 1.1)),
        ylim=(-0.6, y.max() + 1.1),
    )
    draw_regime_lines(ax, alpha_axis="x")
    source = "95 % bootstrap interval" if llm_interval else "± 1.96 Jacobian SE"
    toy_note = f"{len(toys)} toy results with their intervals" if len(toys) else "no toy results were found"
    return finish_figure(fig, f"LLM bar: {llm_fit.n_rows} Chinchilla runs, log-space fit, {source}; {toy_note}.", path)
