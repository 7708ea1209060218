"""Figures of the hidden-state diagnostics (`toymodels diagnose`), from its tidy tables."""

from pathlib import Path

import numpy as np
import seaborn as sns
from matplotlib import ticker

from .style import figure_style, finish_figure, new_figure


def _teacher_columns(frame, rows=1, height=3.4):
    teachers = sorted(frame.teacher.unique())
    fig, axes = new_figure((4.4 * len(teachers), height * rows), rows, len(teachers), squeeze=False, sharey="row")
    return teachers, fig, axes


def _depth_colours(depths):
    return dict(zip(sorted(depths), sns.color_palette("flare", len(depths))))


@figure_style()
def plot_layer_angles(layers, caption, path):
    """Rotation and successive-update angle against normalised depth l/ℓ."""
    teachers, fig, axes = _teacher_columns(layers, rows=2)
    students = layers[layers.network == "student"]
    colour = _depth_colours(students.depth.unique())
    for column, teacher in enumerate(teachers):
        for row, quantity in enumerate(("rotation", "update_angle")):
            ax = axes[row][column]
            for (network, depth), group in layers[layers.teacher == teacher].groupby(["network", "depth"]):
                mean = group.groupby("layer")[quantity].mean().dropna()
                x = (mean.index + 0.5) / depth
                style = (
                    dict(color="0.3", ls="--", lw=1.2) if network == "teacher" else dict(color=colour[depth], lw=1.5)
                )
                ax.plot(x, mean.to_numpy(), label=f"{network} ℓ={depth}", **style)
            ax.set(xlabel="normalised depth l/ℓ" if row else "", title=f"{teacher} teacher" if not row else "")
        axes[1][column].axhline(np.pi / 2, color="0.7", ls=":", lw=1)
    axes[0][0].set_ylabel("rotation θ(h_l, h_{l+1}) [rad]")
    axes[1][0].set_ylabel("update angle θ(Δh_l, Δh_{l+1}) [rad]")
    axes[0][-1].legend(fontsize=7)
    return finish_figure(fig, caption, path)


def _per_student_depth(networks, column):
    """One axis: the students' `column` (mean over replicates and temperatures) against ℓ, a line
    per teacher; yields (colour, means) so the caller can add a guide per line."""
    fig, ax = new_figure((4.8, 3.8))
    students = networks[networks.network == "student"]
    lines = []
    for teacher, colour in zip(sorted(students.teacher.unique()), sns.color_palette("deep")):
        mean = students[students.teacher == teacher].groupby("depth")[column].mean()
        ax.plot(mean.index, mean.to_numpy(), "o-", color=colour, label=f"students of the {teacher} teacher")
        lines.append((colour, mean))
    ax.set(xscale="log", yscale="log", xlabel="student depth ℓ")
    depths = sorted(students.depth.unique())
    ax.set_xticks(depths, [str(d) for d in depths])
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    return fig, ax, lines


@figure_style()
def plot_rotation_vs_depth(networks, caption, path):
    """Mean middle-layer rotation against ℓ (log–log) with a 1/ℓ guide: the ensemble law."""
    fig, ax, lines = _per_student_depth(networks, "middle_rotation")
    for colour, mean in lines:
        ax.plot(mean.index, mean.iloc[-1] * mean.index[-1] / mean.index, ":", color=colour, lw=1)
    ax.set_ylabel("mean middle-layer rotation [rad]")
    ax.text(0.02, 0.02, "dotted: ∝ 1/ℓ", transform=ax.transAxes, fontsize=7, color="0.4")
    ax.legend(fontsize=7)
    return finish_figure(fig, caption, path)


@figure_style()
def plot_angular_distance(distances, caption, path):
    """Heatmaps of d(h_i, h_j) for each teacher and its deepest student (replicate 0)."""
    panels = list(distances.groupby(["teacher", "network", "depth"], sort=True))
    fig, axes = new_figure((3.3 * len(panels), 3.3), 1, len(panels), squeeze=False)
    for ax, ((teacher, network, depth), group) in zip(axes[0], panels):
        matrix = group.groupby(["from_layer", "to_layer"]).distance.mean().unstack().to_numpy()
        image = ax.imshow(matrix, cmap="mako_r", vmin=0, origin="lower")
        ax.set(title=f"{teacher}: {network} ℓ={depth}", xlabel="layer j", ylabel="layer i")
        fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return finish_figure(fig, caption + ".  Gromov angular distance arccos(cos)/π", path)


@figure_style()
def plot_layer_drop(drop_one, caption, path):
    """Relative increase of the test loss when one layer is removed, against its position."""
    teachers, fig, axes = _teacher_columns(drop_one)
    colour = _depth_colours(drop_one.depth.unique())
    for ax, teacher in zip(axes[0], teachers):
        for depth, group in drop_one[drop_one.teacher == teacher].groupby("depth"):
            mean = group.groupby("relative_layer").relative_increase.mean()
            ax.plot(mean.index, mean.to_numpy(), "o-", ms=3, color=colour[depth], label=f"ℓ={depth}")
        ax.set(yscale="log", xlabel="position of the removed layer (l + ½)/ℓ", title=f"{teacher} teacher")
    axes[0][0].set_ylabel("test loss increase, relative")
    axes[0][-1].legend(fontsize=7)
    return finish_figure(fig, caption, path)


@figure_style()
def plot_effective_layers(networks, caption, path):
    """N_eff against ℓ: the number of layers that contribute."""
    fig, ax, lines = _per_student_depth(networks, "effective_layers")
    depths = lines[0][1].index.to_numpy()
    ax.plot(depths, depths, ":", color="0.5", lw=1, label="N_eff = ℓ (every layer equal)")
    ax.set_ylabel("effective layers N_eff")
    ax.legend(fontsize=7)
    return finish_figure(fig, caption, path)


def plot_diagnostics(tables: dict, caption: str, out_dir) -> list[Path]:
    out_dir = Path(out_dir)
    paths = plot_layer_angles(tables["layers"], caption, out_dir / "layer_angles")
    paths += plot_rotation_vs_depth(tables["networks"], caption, out_dir / "rotation_vs_depth")
    paths += plot_angular_distance(tables["angular_distance"], caption, out_dir / "angular_distance")
    paths += plot_layer_drop(tables["drop_one"], caption, out_dir / "layer_drop")
    paths += plot_effective_layers(tables["networks"], caption, out_dir / "effective_layers")
    return paths
