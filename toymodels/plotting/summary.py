"""The suite's findings in one picture: every certified α with its interval, one row per
experiment, teacher and temperature, against the ensemble law and the paper's claims."""

import math
from dataclasses import dataclass
from pathlib import Path

import seaborn as sns

from .style import draw_regime_lines, figure_style, finish_figure, new_figure


@dataclass(frozen=True)
class SummaryPoint:
    experiment: str
    teacher: str
    temperature: float  # NaN: an MSE fit
    alpha: float
    low: float
    high: float
    claimed: float | None  # the paper's α for this teacher in this figure, where it gives one

    @property
    def label(self) -> str:
        temperature = "" if math.isnan(self.temperature) else f", T={self.temperature:.3g}"
        return f"{self.experiment}: {self.teacher}{temperature}"


@figure_style()
def plot_summary(points: list[SummaryPoint], caption: str, path_without_suffix) -> list[Path]:
    """α against row, rows top to bottom in the order given, a colour per teacher; the paper's
    claims as open diamonds, the regimes' α = 1 and 3 as dotted lines."""
    teachers = list(dict.fromkeys(point.teacher for point in points))
    colour = dict(zip(teachers, sns.color_palette("deep", len(teachers))))
    fig, ax = new_figure((7.5, 1.4 + 0.22 * len(points)))
    rows = range(len(points))[::-1]
    for row, point in zip(rows, points):
        ax.errorbar(point.alpha, row, xerr=[[point.alpha - point.low], [point.high - point.alpha]], fmt="o", ms=4,
                    color=colour[point.teacher], capsize=2, lw=1.2)
    claimed = [(row, point.claimed) for row, point in zip(rows, points) if point.claimed is not None]
    if claimed:
        ax.scatter([alpha for _, alpha in claimed], [row for row, _ in claimed], marker="D", s=22,
                   facecolors="none", edgecolors="0.2", lw=0.9, zorder=3, label="the paper's claim")
        ax.legend(loc="upper right", fontsize=8)
    draw_regime_lines(ax, labelled=True, alpha_axis="x")
    ax.set_yticks(list(rows), [point.label for point in points], fontsize=7)
    ax.set_ylim(-0.7, len(points) - 0.3)
    ax.set_xlim(0, max(4.0, max(point.high for point in points) + 0.2))
    ax.set_xlabel("depth exponent α_ℓ (95 % interval), certified students")
    return finish_figure(fig, caption, path_without_suffix)
