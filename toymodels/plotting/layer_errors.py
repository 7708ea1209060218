"""Figures of the layer-error split (`toymodels layer-errors`), from its tidy tables."""

import seaborn as sns

from .style import figure_style, finish_figure, new_figure


@figure_style()
def plot_layer_errors(coherence, lags, caption, path):
    """Three panels, trained students, even slots, errors as the read-out sees them
    (`LayerErrorSplit.seen_by_readout`), a line per (teacher, start): the coherence C
    against ℓ with its references (1: independent addition; the aligned bound ≈ ℓ), the
    neighbouring layers' error cosine against ℓ, and the cosine against the lag j/ℓ at the
    deepest depth whose slots are equal."""
    even = coherence.query("slots == 'even' and training == 'trained' and space == 'readout'")
    lags = lags.query("slots == 'even' and training == 'trained' and space == 'readout'")
    fig, (c_axis, cosine_axis, lag_axis) = new_figure((13.2, 3.9), 1, 3)
    groups = sorted(even.groupby(["teacher", "start"]).groups)
    colours = dict(zip(groups, sns.color_palette("deep", len(groups))))
    for (teacher, start), group in even.groupby(["teacher", "start"]):
        mean = group.groupby("depth")[["coherence", "aligned_bound", "neighbour_cosine"]].mean()
        style = dict(color=colours[teacher, start], label=f"{teacher}, {start} start")
        c_axis.plot(mean.index, mean.coherence, "o-", **style)
        c_axis.plot(mean.index, mean.aligned_bound, ":", color=style["color"], lw=1)
        cosine_axis.plot(mean.index, mean.neighbour_cosine, "o-", **style)
        # rounded even slots make an Euler-like student's errors alternate with the rounding: the
        # deepest student whose slots are equal shows the correlation itself
        equal = group.depth[group.equal_slots]
        shown = int(equal.max() if len(equal) else group.depth.max())
        mine = lags[(lags.teacher == teacher) & (lags.start == start) & (lags.depth == shown)]
        cosines = mine.groupby("lag").cosine.mean()
        lag_axis.plot(cosines.index / shown, cosines.to_numpy(), "-", label=f"{teacher}, {start}, ℓ={shown}",
                      color=style["color"])
    c_axis.axhline(1, color="0.55", ls="--", lw=1)
    c_axis.text(1, 1, " independent addition (C = 1)", transform=c_axis.get_yaxis_transform(), fontsize=7,
                color="0.35", va="bottom", ha="right")
    c_axis.set(xscale="log", yscale="log", xlabel="student depth ℓ",
               ylabel="coherence C = E‖ΣE_k‖² / ΣE‖E_k‖²",
               title="how layer errors add, as the read-out sees them\n(dotted: aligned bound)")
    cosine_axis.axhline(0, color="0.55", ls="--", lw=1)
    cosine_axis.set(xscale="log", xlabel="student depth ℓ", ylabel="mean cos(E_k, E_{k+1})",
                    title="neighbouring layers' errors")
    lag_axis.axhline(0, color="0.55", ls="--", lw=1)
    lag_axis.set(xlabel="lag j/ℓ", ylabel="mean cos(E_k, E_{k+j})", title="error correlation along depth")
    for axis in (c_axis, cosine_axis):
        depths = sorted(even.depth.unique())
        axis.set_xticks(depths, [str(d) for d in depths], minor=False)
        axis.set_xticks([], minor=True)
    c_axis.legend(fontsize=7)
    lag_axis.legend(fontsize=7)
    lag_axis.set_xlim(0, 1)
    return finish_figure(fig, caption, path)
