"""Figures of the layer-error split (`toymodels layer-errors`), from its tidy tables."""

import seaborn as sns

from ..analysis.layer_errors import replicate_means
from .style import figure_style, finish_figure, new_figure

# the read-out split's space in a table: exact, or the first-order one of tables split before it was
READOUT_SPACES = {"readout": "as the read-out sees them", "readout_linearised": "through the linearised read-out"}


@figure_style()
def plot_layer_errors(coherence, lags, caption, path):
    """Three panels, trained students, even slots, errors as the read-out sees them
    (`LayerErrorSplit.seen_by_readout`; linearised in tables split before that was exact), a
    line per (teacher, start), replicates' means (`replicate_means`): the coherence C against ℓ
    with its references (1: independent addition; the aligned bound ≈ ℓ), the neighbouring
    layers' error cosine against ℓ, and the cosine against the lag j/ℓ at the deepest depth
    whose slots are equal."""
    space = next(space for space in READOUT_SPACES if space in set(coherence.space))
    chosen = f"slots == 'even' and training == 'trained' and space == '{space}'"
    even, lags = coherence.query(chosen), lags.query(chosen)
    fig, (c_axis, cosine_axis, lag_axis) = new_figure((13.2, 3.9), 1, 3)
    groups = sorted(even.groupby(["teacher", "start"]).groups)
    colours = dict(zip(groups, sns.color_palette("deep", len(groups))))
    for (teacher, start), group in even.groupby(["teacher", "start"]):
        mean = replicate_means(group, ["depth"], ["coherence", "aligned_bound", "neighbour_cosine"])
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
        lag_axis.plot(
            cosines.index / shown, cosines.to_numpy(), "-", label=f"{teacher}, {start}, ℓ={shown}", color=style["color"]
        )
    c_axis.axhline(1, color="0.55", ls="--", lw=1)
    c_axis.text(
        1,
        1,
        " independent addition (C = 1)",
        transform=c_axis.get_yaxis_transform(),
        fontsize=7,
        color="0.35",
        va="bottom",
        ha="right",
    )
    c_axis.set(
        xscale="log",
        yscale="log",
        xlabel="student depth ℓ",
        ylabel="coherence C = E‖ΣE_k‖² / ΣE‖E_k‖²",
        title=f"how layer errors add, {READOUT_SPACES[space]}\n(dotted: aligned bound)",
    )
    cosine_axis.axhline(0, color="0.55", ls="--", lw=1)
    cosine_axis.set(
        xscale="log",
        xlabel="student depth ℓ",
        ylabel=r"mean cos($E_k$, $E_{k+1}$)",
        title="neighbouring layers' errors",
    )
    lag_axis.axhline(0, color="0.55", ls="--", lw=1)
    lag_axis.set(xlabel="lag j/ℓ", ylabel=r"mean cos($E_k$, $E_{k+j}$)", title="error correlation along depth")
    for axis in (c_axis, cosine_axis):
        depths = sorted(even.depth.unique())
        axis.set_xticks(depths, [str(d) for d in depths], minor=False)
        axis.set_xticks([], minor=True)
    c_axis.legend(fontsize=7)
    lag_axis.legend(fontsize=7)
    lag_axis.set_xlim(0, 1)
    return finish_figure(fig, caption, path)
