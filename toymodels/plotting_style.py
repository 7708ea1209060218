"""One look for every figure of the suite: paper-like, readable at a glance, saved as PNG and PDF."""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # figures are files; never needs a display
import matplotlib.pyplot as plt  # noqa: E402
import seaborn as sns  # noqa: E402


def apply_style() -> None:
    sns.set_theme(context="paper", style="ticks", font_scale=1.15)
    plt.rcParams.update({"figure.dpi": 110, "savefig.dpi": 200, "axes.spines.top": False,
                         "axes.spines.right": False, "legend.frameon": False})


def add_caption(fig, text: str) -> None:
    """A small line under the figure naming the protocol the data came from."""
    fig.text(0.01, 0.005, text, fontsize=7, color="0.35", ha="left", va="bottom", wrap=True)


def save_figure(fig, path_without_suffix) -> list[Path]:
    """Write `<path>.png` and `<path>.pdf`; returns both paths."""
    base = Path(path_without_suffix)
    base.parent.mkdir(parents=True, exist_ok=True)
    paths = [base.with_suffix(".png"), base.with_suffix(".pdf")]
    for path in paths:
        fig.savefig(path, bbox_inches="tight")
    plt.close(fig)
    return paths
