"""One look for every figure of the suite: paper-like, readable at a glance, saved as PNG and PDF
with its caption (the protocol its data came from) in the files' metadata.

Figures are `matplotlib.figure.Figure` objects, never pyplot ones: a Figure saves to PNG and PDF
with no backend chosen and no display, so importing or plotting leaves a notebook's backend alone,
and nothing global keeps it alive (no plt.close). The style lives in an rc context, not in the
global rcParams, so drawing a figure leaves the caller's settings as they were.
"""

from pathlib import Path

import matplotlib
import seaborn as sns
from matplotlib.figure import Figure
from PIL import Image

_STYLE = {
    **sns.axes_style("ticks"),
    **sns.plotting_context("paper", font_scale=1.15),
    "axes.prop_cycle": matplotlib.cycler(color=sns.color_palette("deep")),
    "figure.dpi": 110,
    "savefig.dpi": 200,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
}

ALPHA = r"$\alpha_\ell$"  # the depth exponent, typeset (a plain "α_ℓ" shows its underscore)

# The two regimes a depth exponent is read against.
REGIMES = ((1, "ensemble averaging"), (3, "procedural assembly"))
REGIME_REACH = 0.25  # a regime's line is shown when it lies within this much (or half the data's span) of the data


def figure_style():
    """The suite's look, for as long as a figure is built and saved; as a decorator
    (`@figure_style()`) it covers a whole figure function."""
    return matplotlib.rc_context(_STYLE)


def new_figure(figsize, nrows=1, ncols=1, **subplots_options):
    """Like `plt.subplots`, without pyplot: returns (figure, axes)."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, **subplots_options)


def draw_regime_lines(ax, alpha_axis: str = "y") -> None:
    """Dotted lines at α = 1 and α = 3 across `ax`, whose `alpha_axis` ("x" or "y") carries α, each
    named inside the axes at its start. Drawn after the data: the axis stays fitted to the data,
    widened only to a regime line near it (within REGIME_REACH, or half the data's span)."""
    low, high = ax.get_ylim() if alpha_axis == "y" else ax.get_xlim()
    reach = max(REGIME_REACH, (high - low) / 2)
    shown = [(level, name) for level, name in REGIMES if low - reach <= level <= high + reach]
    for level, name in shown:
        text = f"{ALPHA} = {level}: {name}"
        if alpha_axis == "y":
            ax.axhline(level, color="0.55", ls=":", lw=1)
            ax.text(
                0.01, level, text, transform=ax.get_yaxis_transform(), va="bottom", ha="left", fontsize=7, color="0.35"
            )
        else:
            ax.axvline(level, color="0.55", ls=":", lw=1)
            ax.text(
                level,
                0.995,
                f" {text}",
                transform=ax.get_xaxis_transform(),
                va="top",
                ha="left",
                fontsize=7,
                color="0.35",
            )
    levels = [level for level, _ in shown]
    padding = 0.05 * (max(high, *levels) - min(low, *levels)) if levels else 0
    limits = (min(low, min(levels, default=low) - padding), max(high, max(levels, default=high) + padding))
    (ax.set_ylim if alpha_axis == "y" else ax.set_xlim)(*limits)


def finish_figure(fig: Figure, caption: str, path_without_suffix) -> list[Path]:
    """Lay the axes out and write `<path>.png` and `<path>.pdf` with `caption` (the protocol the
    data came from, and the figure's key) in each file's metadata, where `figure_caption` reads it
    back and the docs print it under the figure; returns both paths."""
    fig.tight_layout()
    base = Path(path_without_suffix)
    base.parent.mkdir(parents=True, exist_ok=True)
    paths = [base.with_suffix(".png"), base.with_suffix(".pdf")]
    # no creation date in the PDF: the same data draws the same bytes, so redrawing a committed run changes nothing
    for path, metadata in zip(paths, ({"Description": caption}, {"Subject": caption, "CreationDate": None})):
        fig.savefig(path, bbox_inches="tight", metadata=metadata)
    return paths


def figure_caption(png) -> str:
    """The caption a figure of the suite carries in its PNG's metadata ("" for one without)."""
    with Image.open(png) as image:
        return image.text.get("Description", "")
