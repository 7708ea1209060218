"""The suite's findings in one picture: every certified α with its interval, and the headline
experiments' lower bounds (open markers), one row per experiment, teacher and temperature, grouped
by teacher family, against the two regimes and the paper's claims."""

import math
from dataclasses import dataclass
from pathlib import Path

import seaborn as sns
from matplotlib.lines import Line2D

from ..registry import parse_call
from .style import ALPHA, draw_regime_lines, figure_style, finish_figure, new_figure

FAMILY_ORDER = ("independent", "correlated", "grouped", "smooth", "tied")  # from unrelated layers to one layer
PARAMETER_SYMBOLS = {"rho": "ρ"}


@dataclass(frozen=True)
class SummaryPoint:
    experiment: str
    teacher: str
    temperature: float  # NaN: an MSE fit
    alpha: float
    low: float
    high: float
    claimed: float | None  # the paper's α for this teacher in this figure, where it gives one
    student: str = "euler"
    certified: bool = True  # False: a lower bound (not certified, or its certificate withdrawn)
    withdrawn: bool = False  # its certificate withdrawn: another committed run went below its students

    @property
    def family(self) -> str:
        return parse_call("teacher", self.teacher)[0]

    @property
    def label(self) -> str:
        """`crossover_high: correlated, ρ = 0.95, T = 0.1` (the student named when it is not Euler's)."""
        family, parameters = parse_call("teacher", self.teacher)
        parts = [family, *(f"{PARAMETER_SYMBOLS.get(key, key)} = {value:g}" for key, value in parameters.items())]
        parts += [f"{self.student} students"] * (self.student != "euler")
        parts += [] if math.isnan(self.temperature) else [f"T = {self.temperature:.3g}"]
        return f"{self.experiment}: {', '.join(parts)}"

    def order(self) -> tuple:
        family, parameters = parse_call("teacher", self.teacher)
        rank = FAMILY_ORDER.index(family) if family in FAMILY_ORDER else len(FAMILY_ORDER)
        temperature = -1.0 if math.isnan(self.temperature) else self.temperature
        return (
            rank,
            family,
            sorted(parameters.items()),
            self.student != "euler",
            self.student,
            self.experiment,
            temperature,
        )


@figure_style()
def plot_summary(points: list[SummaryPoint], caption: str, path_without_suffix) -> list[Path]:
    """α against row, rows top to bottom by teacher family (independent, correlated by ρ, tied),
    a colour per family with its legend, a certified fit as a filled circle, a lower bound as an
    open one, a withdrawn certificate as an open square; the paper's claims as open diamonds, the
    regimes' α = 1 and 3 as labelled dotted lines."""
    points = sorted(points, key=SummaryPoint.order)
    families = list(dict.fromkeys(point.family for point in points))
    colour = dict(zip(families, sns.color_palette("deep", len(families))))
    fig, ax = new_figure((7.5, 1.8 + 0.22 * len(points)))
    rows = range(len(points))[::-1]
    for row, point in zip(rows, points):
        ax.errorbar(
            point.alpha,
            row,
            xerr=[[point.alpha - point.low], [point.high - point.alpha]],
            fmt="s" if point.withdrawn else "o",
            ms=4,
            color=colour[point.family],
            mfc=colour[point.family] if point.certified else "white",
            capsize=2,
            lw=1.2,
        )
    claimed = [(row, point.claimed) for row, point in zip(rows, points) if point.claimed is not None]
    handles = [
        Line2D([], [], marker="o", ls="", color=colour[family], label=f"{family} teacher") for family in families
    ]
    if any(not point.certified and not point.withdrawn for point in points):
        handles.append(Line2D([], [], marker="o", ls="", color="0.3", mfc="white", label="lower bound"))
    if any(point.withdrawn for point in points):
        handles.append(Line2D([], [], marker="s", ls="", color="0.3", mfc="white", label="withdrawn: a lower bound"))
    if claimed:
        handles.append(
            ax.scatter(
                [alpha for _, alpha in claimed],
                [row for row, _ in claimed],
                marker="D",
                s=22,
                facecolors="none",
                edgecolors="0.2",
                lw=0.9,
                zorder=3,
                label="the paper's claim",
            )
        )
    ax.set_yticks(list(rows), [point.label for point in points], fontsize=7)
    ax.set_ylim(-0.7, len(points) + 0.8)  # the top row of room holds the regimes' names
    ax.set_xlim(0, max(4.0, max(point.high for point in points) + 0.2))
    draw_regime_lines(ax, alpha_axis="x")
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.6 / (1.8 + 0.22 * len(points))),
        ncol=len(handles),
        fontsize=8,
    )
    ax.set_xlabel(f"depth exponent {ALPHA} (95 % interval): filled, certified; open, a lower bound or withdrawn")
    return finish_figure(fig, caption, path_without_suffix)
