"""The figure helpers: the package leaves matplotlib's global state alone, every figure is captioned
and written as PNG and PDF, and α figures mark the two regimes at α = 1 and α = 3."""

import json
import math
import os
import subprocess
import sys

import pytest

from toymodels.plotting import fit_figures as plotting
from toymodels.plotting import scaling_law
from toymodels.plotting.style import (
    draw_regime_lines,
    figure_caption,
    figure_style,
    finish_figure,
    new_figure,
)
from toymodels.results.depth_fit import DepthFit


def depth_fit(teacher="independent", temperature=0.5, alpha=1.0) -> DepthFit:
    """A fit as `fit_run` returns it, made by hand: L = ℓ^(−α) at four depths."""
    depths = [2, 4, 8, 16]
    return DepthFit(
        teacher=teacher,
        temperature=temperature,
        alpha=alpha,
        alpha_low=alpha - 0.1,
        alpha_high=alpha + 0.1,
        interval="bootstrap over 2 replicates",
        replicates=2,
        steps=100,
        depths=depths,
        losses=[d**-alpha for d in depths],
        local_slopes=[alpha] * 3,
        floor_fit=None,
        certified=True,
        uncertified_depths=[],
        alpha_over_training=[(10, 0.5), (100, alpha)],
    )


FITS = [depth_fit("independent", 0.5, 1.1), depth_fit("independent", 2.0, 0.9), depth_fit("markov", 0.5, 2.9)]

# Run in a fresh interpreter: in this one the package is imported already.
LEAVES_MATPLOTLIB_ALONE = """
import json, sys
import matplotlib
matplotlib.use("svg")  # the user's choice, as a notebook would make it
KEYS = ("savefig.dpi", "figure.dpi", "axes.spines.top", "font.size", "legend.frameon", "axes.prop_cycle")
before = {key: str(matplotlib.rcParams[key]) for key in KEYS}
import toymodels, toymodels.cli.main, toymodels.plotting.fit_figures, toymodels.plotting.diagnostics
import toymodels.analysis.scaling_law
from toymodels.results.depth_fit import DepthFit
assert matplotlib.get_backend() == "svg", "importing set the backend: " + matplotlib.get_backend()
fits = [DepthFit.from_dict(fit) for fit in json.loads(sys.argv[1])]
paths = toymodels.plotting.fit_figures.plot_regimes(fits, "caption", sys.argv[2])
assert all(path.stat().st_size > 0 for path in paths), paths
assert matplotlib.get_backend() == "svg", "drawing set the backend: " + matplotlib.get_backend()
after = {key: str(matplotlib.rcParams[key]) for key in KEYS}
assert after == before, f"rcParams changed: {before} -> {after}"
import matplotlib.pyplot as plt
assert plt.get_fignums() == [], "a figure was left open in pyplot"
"""


@pytest.mark.slow
def test_importing_and_drawing_leave_the_backend_and_rcparams_alone(tmp_path):
    environment = {key: value for key, value in os.environ.items() if key not in ("DISPLAY", "MPLBACKEND")}
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            LEAVES_MATPLOTLIB_ALONE,
            json.dumps([fit.as_dict() for fit in FITS]),
            str(tmp_path / "regimes"),
        ],
        env=environment,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr


def test_finish_figure_writes_png_and_pdf_with_the_caption_in_their_metadata(tmp_path):
    with figure_style():
        fig, ax = new_figure((4, 3))
        ax.plot([1, 2], [3, 4])
        ax.set_xlabel("depth")
        paths = finish_figure(fig, "protocol of the run", tmp_path / "sub" / "figure")
    assert paths == [tmp_path / "sub" / "figure.png", tmp_path / "sub" / "figure.pdf"]
    assert paths[0].read_bytes().startswith(b"\x89PNG") and paths[1].read_bytes().startswith(b"%PDF")
    assert figure_caption(paths[0]) == "protocol of the run"
    assert b"protocol of the run" in paths[1].read_bytes()  # the PDF's Subject
    assert not fig.texts  # no caption in small type over the figure itself


def regime_levels(ax, alpha_axis="y"):
    """Where `ax` has lines across its whole width (height, for α on x)."""
    lines = [
        line for line in ax.get_lines() if list(line.get_xdata() if alpha_axis == "y" else line.get_ydata()) == [0, 1]
    ]
    return sorted(float((line.get_ydata() if alpha_axis == "y" else line.get_xdata())[0]) for line in lines)


def regime_names(ax):
    return [text.get_text().strip() for text in ax.texts]


@pytest.mark.parametrize("alpha_axis", ["x", "y"])
def test_regime_lines_mark_alpha_1_and_3_with_their_names_and_leave_the_axis_fitted_to_the_data(alpha_axis):
    ax = new_figure((3, 2))[1]
    (ax.plot if alpha_axis == "x" else lambda x, y: ax.plot(y, x))([0.5, 2, 3.5], [0.2, 0.5, 0.8])
    draw_regime_lines(ax, alpha_axis=alpha_axis)
    assert regime_levels(ax, alpha_axis) == [1, 3]
    assert regime_names(ax) == ["$\\alpha_\\ell$ = 1: ensemble averaging", "$\\alpha_\\ell$ = 3: procedural assembly"]
    near_one = new_figure((3, 2))[1]  # data at 0.8: the axis stays near it, with α = 1 and not α = 3
    (near_one.plot if alpha_axis == "x" else lambda x, y: near_one.plot(y, x))([0.78, 0.8, 0.84], [0.2, 0.5, 0.8])
    draw_regime_lines(near_one, alpha_axis=alpha_axis)
    low, high = near_one.get_xlim() if alpha_axis == "x" else near_one.get_ylim()
    assert regime_levels(near_one, alpha_axis) == [1] and 0.7 < low < 0.78 and 1 < high < 1.2


@pytest.fixture
def finished(monkeypatch):
    """The figures handed to `finish_figure`, by file name, with their captions; nothing is written."""
    figures = {}

    def record(fig, caption, path):
        figures[os.path.basename(path)] = fig, caption
        return []

    monkeypatch.setattr(plotting, "finish_figure", record)
    monkeypatch.setattr(scaling_law, "finish_figure", record)
    return figures


def test_every_alpha_axis_has_the_regime_lines(finished, tmp_path):
    plotting.plot_run(FITS, "protocol", tmp_path)
    plotting.plot_regimes(FITS, "protocol", tmp_path / "regimes")
    plotting.plot_comparison({"this run": FITS, "that run": FITS[:1]}, "protocol", tmp_path / "compared")
    plotting.plot_alpha_vs_parameter(
        [depth_fit(f"correlated(rho={rho})", 1.0, 1 + 2 * rho) for rho in (0, 0.5, 1)],
        "rho",
        "protocol",
        tmp_path / "alpha_vs_rho",
    )
    assert all("protocol" in caption for _, caption in finished.values())
    axes = {name: fig.axes for name, (fig, _) in finished.items()}
    assert [regime_levels(ax) for ax in axes["loss_vs_depth"]] == [[], []]
    assert [regime_levels(ax) for ax in axes["alpha_vs_step"]] == [[1, 3], [1, 3]]
    for name in ("alpha_vs_temperature", "compared", "alpha_vs_rho"):
        assert regime_levels(axes[name][0]) == [1, 3]
        assert len(regime_names(axes[name][0])) == 2, name  # every line says which regime it is
    depth_ax, time_ax = axes["regimes"]
    assert regime_levels(depth_ax) == [] and regime_levels(time_ax) == [1, 3] and len(regime_names(time_ax)) == 2


def test_the_budget_figure_shades_each_interval_and_says_what_a_point_is(finished, tmp_path):
    fits = [depth_fit("independent", math.nan, 1.0), depth_fit("tied", math.nan, 2.5)]
    for fit in fits:
        fit.alpha_over_training = [(10, 0.4, 0.1, 0.7), (100, fit.alpha, fit.alpha_low, fit.alpha_high)]
    plotting.plot_alpha_vs_budget(fits, "protocol", tmp_path / "alpha_vs_budget")
    fig, caption = finished["alpha_vs_budget"]
    assert caption.startswith("protocol") and "capped at that many steps" in caption
    for ax, fit in zip(fig.axes, fits):
        assert regime_levels(ax) == [1, 3]
        [band] = ax.collections
        assert band.get_paths()[0].vertices[:, 1].min() == pytest.approx(0.1)
        assert band.get_paths()[0].vertices[:, 1].max() == pytest.approx(fit.alpha_high)


def test_alpha_against_step_shows_the_zero_starts_trap_beside_the_certified_alpha(finished, tmp_path):
    certified, single = depth_fit("tied", 0.01, 2.8), depth_fit("tied", 1.0, 2.5)
    certified.start_alphas_over_training = {"zero": [(10, 0.3), (100, 1.2)], "discretised": [(10, 2.7), (100, 2.8)]}
    plotting.plot_alpha_vs_step([certified, single], "protocol", tmp_path / "alpha_vs_step")
    fig, caption = finished["alpha_vs_step"]
    assert caption.startswith("protocol") and "zero-start students alone" in caption
    (ax,) = fig.axes
    curves = [list(line.get_ydata()) for line in ax.get_lines() if line.get_linestyle() == "-"]
    assert curves == [[0.3, 1.2], [0.5, 2.5]]  # the zero start's, and the single-start fit's own
    assert [level for level in regime_levels(ax) if level not in (1, 3)] == [2.8]  # the certified α, dashed
    plotting.plot_alpha_vs_step([single], "protocol", tmp_path / "alpha_vs_step")
    assert "zero-start" not in finished["alpha_vs_step"][1]


def test_the_llm_summary_marks_the_regimes_on_its_alpha_axis(finished, tmp_path):
    fit = scaling_law.ScalingLawFit(
        alpha_m=1.0,
        alpha_l=1.2,
        alpha_D=0.3,
        c_m=1.0,
        c_l=1.0,
        c_D=1.0,
        L0=1.75,
        stderr={"alpha_l": 0.3},
        mean_relative_error=0.004,
        rmse_log=0.01,
        n_rows=203,
    )
    scaling_law.plot_alpha_summary(fit, [("independent teacher", 1.0, 0.9, 1.1)], tmp_path / "summary")
    [ax] = finished["summary"][0].axes
    assert regime_levels(ax, "x") == [1, 3] and len(regime_names(ax)) == 2
    assert "203 Chinchilla runs" in finished["summary"][1]


def legend_texts(ax) -> list[str]:
    legend = ax.get_legend()
    return [text.get_text() for text in legend.get_texts()] if legend else []


def legend_handle(ax, label):
    legend = ax.get_legend()
    return next(handle for handle, text in zip(legend.legend_handles, legend.get_texts()) if text.get_text() == label)


def uncertified_fit_with_references(teacher="tied") -> DepthFit:
    """A fit with the untrained discretisation beside it, the replicates' students, and a student
    that did not converge: every mark of a loss-against-depth panel."""
    fit = depth_fit(teacher, math.nan, 2.0)
    fit.certified, fit.uncertified_depths = False, [16]
    fit.reference_losses = [10 * loss for loss in fit.losses]
    fit.students = [
        {"replicate": r, "depth": d, "start": "discretised", "test_loss": d**-2.0, "fitted": True}
        for r in range(2)
        for d in fit.depths
    ]
    return fit


def test_loss_against_depth_names_the_dashed_discretisation_the_dots_and_the_star_in_its_legend(finished, tmp_path):
    plotting.plot_loss_vs_depth([uncertified_fit_with_references()], "protocol", tmp_path / "loss_vs_depth")
    (ax,) = finished["loss_vs_depth"][0].axes
    texts = legend_texts(ax)
    assert texts[0].endswith(" *")  # the fit's own entry carries the star the key explains
    assert plotting.UNCERTIFIED_LABEL in texts and plotting.REPLICATE_LABEL in texts
    [discretisation] = [text for text in texts if text.startswith(plotting.DISCRETISATION_LABEL)]
    assert "discretised start" in discretisation
    handle = legend_handle(ax, discretisation)  # drawn as the line it names: dashed, crosses (open circles
    #                                             mean "not certified" in every figure)
    assert handle.get_linestyle() == "--" and handle.get_marker() == plotting.DISCRETISATION_MARKER != "o"
    drawn = [line for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert len(drawn) == 1 and drawn[0].get_marker() == plotting.DISCRETISATION_MARKER
    # a certified fit with no references and no replicates' students: nothing to explain, no key
    plotting.plot_loss_vs_depth([depth_fit("tied", math.nan, 2.0)], "protocol", tmp_path / "loss_vs_depth")
    (ax,) = finished["loss_vs_depth"][0].axes
    assert len(legend_texts(ax)) == 1 and "*" not in legend_texts(ax)[0]


def test_the_regimes_figure_keys_its_marks_and_bands_its_alpha_against_step(finished, tmp_path):
    fit = uncertified_fit_with_references()
    fit.alpha_over_training = [(10, 0.5, 0.2, 0.9), (100, 2.0, 1.8, 2.3)]
    plotting.plot_regimes([fit, depth_fit("independent", math.nan, 1.0)], "protocol", tmp_path / "regimes")
    depth_ax, time_ax = finished["regimes"][0].axes
    assert plotting.UNCERTIFIED_LABEL in legend_texts(depth_ax)
    assert any(text.startswith(plotting.DISCRETISATION_LABEL) for text in legend_texts(depth_ax))
    [band] = time_ax.collections  # the fit with an interval only
    assert band.get_paths()[0].vertices[:, 1].min() == pytest.approx(0.2)
    assert plotting.BAND_LABEL in legend_texts(time_ax)


def test_alpha_against_temperature_draws_an_uncertified_alpha_open_with_an_arrow_up(finished, tmp_path):
    fits = [depth_fit("independent", temperature, alpha) for temperature, alpha in ((0.1, 1.1), (1.0, 0.9), (10, 0.8))]
    fits[1].certified = False
    plotting.plot_alpha_vs_temperature(fits, "protocol", tmp_path / "alpha_vs_temperature")
    (ax,) = finished["alpha_vs_temperature"][0].axes
    marked = [line for line in ax.get_lines() if line.get_marker() == "o" and len(line.get_xdata())]
    open_ = [line for line in marked if line.get_markerfacecolor() in ("white", "none", (1, 1, 1, 1))]
    filled = [line for line in marked if line not in open_]
    assert [list(line.get_xdata()) for line in open_] == [[1.0]]
    assert [list(line.get_ydata()) for line in filled] == [[1.1, 0.8]]
    arrows = [text for text in ax.texts if getattr(text, "arrow_patch", None) is not None]
    assert len(arrows) == 1 and arrows[0].xy == (1.0, 0.9)  # one arrow, at the lower bound
    assert plotting.LOWER_BOUND_LABEL in legend_texts(ax)
    plotting.plot_alpha_vs_temperature([fits[0], fits[2]], "protocol", tmp_path / "alpha_vs_temperature")
    (ax,) = finished["alpha_vs_temperature"][0].axes
    assert plotting.LOWER_BOUND_LABEL not in legend_texts(ax)  # every α certified: no key for what is not there
    assert not [text for text in ax.texts if getattr(text, "arrow_patch", None) is not None]


def test_alpha_against_step_shades_its_95_percent_interval_from_the_fit(finished, tmp_path):
    fit = depth_fit("tied", math.nan, 2.0)
    fit.alpha_over_training = [(10, 0.5, 0.1, 0.9), (100, 1.5, 1.2, 1.7), (1000, 2.0, 1.9, 2.1)]
    plotting.plot_alpha_vs_step([fit], "protocol", tmp_path / "alpha_vs_step")
    (ax,) = finished["alpha_vs_step"][0].axes
    [band] = ax.collections
    vertices = band.get_paths()[0].vertices
    assert vertices[:, 1].min() == pytest.approx(0.1) and vertices[:, 1].max() == pytest.approx(2.1)
    assert sorted(set(vertices[:, 0])) == [10, 100, 1000]  # the fit's own steps, nothing interpolated beyond
    assert plotting.BAND_LABEL in legend_texts(ax)
    assert "95" in ax.get_ylabel()
    # a fit.json older than the interval (step, α) pairs: the curve alone, no band and no key for one
    plotting.plot_alpha_vs_step([depth_fit("tied", math.nan, 2.0)], "protocol", tmp_path / "alpha_vs_step")
    (ax,) = finished["alpha_vs_step"][0].axes
    assert not ax.collections and plotting.BAND_LABEL not in legend_texts(ax)


def test_alpha_against_step_ends_an_uncertified_curve_in_an_open_circle(finished, tmp_path):
    fit = uncertified_fit_with_references()
    fit.alpha_over_training = [(10, 0.5, 0.1, 0.9), (100, 1.5, 1.2, 1.7), (1000, 2.0, 1.9, 2.1)]
    plotting.plot_alpha_vs_step([fit, depth_fit("independent", math.nan, 1.0)], "protocol", tmp_path / "alpha_vs_step")
    panels = {ax.get_title(): ax for ax in finished["alpha_vs_step"][0].axes}
    tied_ax, independent_ax = panels["tied teacher"], panels["independent teacher"]
    [bound] = [line for line in tied_ax.get_lines() if line.get_marker() == "o"]
    assert bound.get_markerfacecolor() == "white" and list(bound.get_xdata()) == [1000]
    assert plotting.OPEN_LABEL in legend_texts(tied_ax)
    assert plotting.OPEN_LABEL not in legend_texts(independent_ax)  # certified: nothing open to explain
