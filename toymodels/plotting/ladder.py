"""The budget ladder's figure (`toymodels ladder`), from its tidy table."""

import numpy as np
import seaborn as sns
from matplotlib.lines import Line2D

from ..columns import GROUP
from ..results.ladder import ladder_rungs
from .style import figure_style, finish_figure, new_figure

REPLICATE_LINE_LABEL = "thin: each teacher replicate (thick: their geometric mean)"


@figure_style()
def plot_ladder(ladder, caption, path):
    """Per group (teacher, temperature) a panel: each depth's loss against its budget (×1, ×2, ×4 on
    a log axis; geometric mean over replicates, each replicate faint), and at the right, past the
    last rung, its extrapolated L∞ with its 95 % interval (open where it is not extrapolable)."""
    groups = list(ladder.groupby(GROUP, dropna=False, sort=True))
    fig, axes = new_figure((8.0 * len(groups), 4.6), 1, len(groups), squeeze=False)  # room for the legend beside it
    rungs = ladder_rungs(ladder)
    limit_at = rungs[-1] * 2.8  # where L∞ is drawn: past the last rung, on the same axis
    for axis, ((teacher, temperature), students) in zip(axes[0], groups):
        depths = sorted(students.depth.unique())
        colours = dict(zip(depths, sns.color_palette("viridis", len(depths))))
        for depth, rows in students.groupby("depth"):
            losses = rows[[f"loss_x{rung}" for rung in rungs]].to_numpy()
            trained = ~np.isnan(losses).any(0)  # a ladder may train its last rungs at the shallow depths only
            losses, depth_rungs = losses[:, trained], np.asarray(rungs)[trained]
            for replicate in losses:
                axis.plot(depth_rungs, replicate, "-", color=colours[depth], lw=0.6, alpha=0.35)
            axis.plot(depth_rungs, np.exp(np.log(losses).mean(0)), "o-", color=colours[depth], label=f"ℓ={depth}")
            limits = rows.loss_inf.to_numpy()
            if np.isfinite(limits).all():
                mean = np.exp(np.log(limits).mean())
                low, high = np.exp(np.log(rows.loss_inf_low).mean()), np.exp(np.log(rows.loss_inf_high).mean())
                axis.errorbar(
                    [limit_at], [mean], yerr=[[mean - low], [high - mean]], fmt="s", color=colours[depth], capsize=3
                )
                axis.plot(
                    [depth_rungs[-1], limit_at],
                    [np.exp(np.log(losses[:, -1]).mean()), mean],
                    ":",
                    color=colours[depth],
                    lw=1,
                )
            else:
                axis.plot([limit_at], [np.exp(np.log(losses[:, -1]).mean())], "s", mfc="none", color=colours[depth])
        name = teacher if np.isnan(temperature) else f"{teacher}, T={temperature:g}"
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xticks([*rungs, limit_at], [*(f"×{rung}" for rung in rungs), "L∞"], minor=False)
        axis.set_xticks([], minor=True)
        axis.set(
            xlabel="budget of the last stage",
            ylabel="test loss",
            title=f"{name}: loss against budget\n(square: extrapolated L∞, 95 %; open: not extrapolable,\n"
            f"the last rung's loss only an upper bound)",
        )
        handles, _ = axis.get_legend_handles_labels()
        if students.groupby("depth").size().max() > 1:  # a joined ladder: the faint lines are its teachers
            handles.append(Line2D([], [], color="0.35", lw=0.6, alpha=0.35, label=REPLICATE_LINE_LABEL))
        axis.legend(handles=handles, fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))  # clear of L∞
    return finish_figure(fig, caption, path)
