"""One look for every figure of the suite: paper-like, readable at a glance, captioned with its
protocol, saved as PNG and PDF.

Figures are `matplotlib.figure.Figure` objects, never pyplot ones: a Figure saves to PNG and PDF
with no backend chosen and no display, so importing or plotting leaves a notebook's backend alone,
and nothing global keeps it alive (no plt.close). The style lives in an rc context, not in the
global rcParams, so drawing a figure leaves the caller's settings as they were.
"""

from pathlib import Path

import matplotlib
import seaborn as sns
from matplotlib.figure import Figure

_STYLE = {**sns.axes_style("ticks"), **sns.plotting_context("paper", font_scale=1.15),
          "axes.prop_cycle": matplotlib.cycler(color=sns.color_palette("deep")),
          "figure.dpi": 110, "savefig.dpi": 200, "axes.spines.top": False, "axes.spines.right": False,
          "legend.frameon": False}

# The two regimes a depth exponent is read against.
REGIMES = ((1, "ensemble averaging, α≈1"), (3, "procedural assembly, α≈3"))


def figure_style():
    """The suite's look, for as long as a figure is built and saved; as a decorator
    (`@figure_style()`) it covers a whole figure function."""
    return matplotlib.rc_context(_STYLE)


def new_figure(figsize, nrows=1, ncols=1, **subplots_options):
    """Like `plt.subplots`, without pyplot: returns (figure, axes)."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **subplots_options)


def draw_regime_lines(ax, *, labelled: bool, alpha_axis: str = "y") -> None:
    """Dotted lines at α = 1 and α = 3 across `ax`, whose `alpha_axis` ("x" or "y") carries α;
    `labelled` names each regime beside its line."""
    for level, name in REGIMES:
        if alpha_axis == "y":  # names just past the right end of the lines
            ax.axhline(level, color="0.55", ls=":", lw=1)
            label = dict(x=1, y=level, transform=ax.get_yaxis_transform(), va="center")
        else:  # names above the axes, left of their line: on the right the last would run past the axes
            ax.axvline(level, color="0.55", ls=":", lw=1)
            label = dict(x=level, y=1, transform=ax.get_xaxis_transform(), va="bottom", ha="right")
        if labelled:
            ax.text(s=f" {name} ", fontsize=7, color="0.35", **label)


def finish_figure(fig: Figure, caption: str, path_without_suffix) -> list[Path]:
    """Lay the axes out, put `caption` (the protocol the data came from) in small type under
    everything, and write `<path>.png` and `<path>.pdf`; returns both paths."""
    fig.tight_layout()
    # Below the lowest label, whatever its height; the tight bounding box of savefig makes room.
    bottom = fig.get_tightbbox().y0 / fig.get_figheight()
    fig.text(0.01, bottom - 0.01, caption, fontsize=7, color="0.35", ha="left", va="top", wrap=True)
    base = Path(path_without_suffix)
    base.parent.mkdir(parents=True, exist_ok=True)
    paths = [base.with_suffix(".png"), base.with_suffix(".pdf")]
    for path in paths:
        fig.savefig(path, bbox_inches="tight")
    return paths
