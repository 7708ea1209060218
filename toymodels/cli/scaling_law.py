"""`toymodels scaling-law`: the decomposed scaling law fitted to the Chinchilla shapes, with its error bars."""

import json
from dataclasses import asdict
from pathlib import Path

import click

from ..analysis.scaling_law import (
    PAPER,
    REPORTED,
    bootstrap_scaling_law,
    fit_scaling_law,
    holdout_check,
    load_chinchilla,
    scan_drop_top,
)
from ..plotting.scaling_law import plot_alpha_summary, plot_depth_term
from ..workflows.experiment import REFERENCE_DIR
from ..workflows.experiment_figures import reference_exponents

HOLDOUT_SPLITS = 20
SCAN_KS = (0, 20, 40, 60, 80)


@click.command("scaling-law", short_help="Fit the Chinchilla runs' scaling law in model size, depth and data.")
@click.option(
    "--drop-top",
    "drop_top",
    default=40,
    show_default=True,
    metavar="K",
    help="Drop the runs with the K highest losses (ties together) before fitting.",
)
@click.option(
    "--depth-offset",
    default=0,
    show_default=True,
    metavar="k",
    help="Count depth as n_layers − k; k = 2 lowers α_ℓ to about 1.1.",
)
@click.option(
    "--bootstrap",
    "n_bootstrap",
    default=200,
    show_default=True,
    metavar="N",
    help="Resamples for the 95 % intervals; 0 skips them.",
)
@click.option("--seed", default=0, show_default=True, help="Seed of the bootstrap and of the holdout splits.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document with everything instead of tables.")
@click.option(
    "--out",
    "--figures",
    "figures",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Also draw the depth term and the α_ℓ summary into DIR (PNG and PDF).",
)
@click.option(
    "--reference",
    type=click.Path(file_okay=False, path_type=Path),
    default=REFERENCE_DIR,
    show_default=True,
    help="Results tree (DIR/regimes/cpu/fit.json) whose toy exponents the α_ℓ summary "
    "shows beside the LLM's; the repository's committed results are in figures/.",
)
def scaling_law_command(drop_top, depth_offset, n_bootstrap, seed, as_json, figures, reference):
    """Fit L = c_m/m^α_m + c_ℓ/ℓ^α_ℓ + c_D/D^α_D + L₀ to the Chinchilla runs in log space.

    m = d_model, ℓ = 100·n_layers, D = tokens in millions. Prints each exponent with its Jacobian standard error,
    bootstrap 95 % interval and the value of Liu et al. (2026); the mean relative error on all rows and on
    held-out rows; and how the fit moves with K.
    """
    runs = load_chinchilla(drop_top, depth_offset)
    fit = fit_scaling_law(runs)
    intervals = bootstrap_scaling_law(runs, fit, n_bootstrap, seed) if n_bootstrap else None
    holdout = holdout_check(runs, fit, HOLDOUT_SPLITS, seed)
    scan = scan_drop_top(SCAN_KS, depth_offset)
    written = []
    if figures:
        interval_l = intervals["alpha_l"] if intervals else None
        written += plot_depth_term(
            runs,
            fit,
            figures / "scaling_law_depth_term",
            drop_top=drop_top,
            depth_offset=depth_offset,
            alpha_l_interval=interval_l,
        )
        written += plot_alpha_summary(
            fit,
            reference_exponents(reference=reference),
            figures / "scaling_law_alpha_summary",
            llm_interval=interval_l,
        )
    if as_json:
        document = {
            "protocol": {
                "drop_top": drop_top,
                "depth_offset": depth_offset,
                "rows": fit.n_rows,
                "bootstrap": n_bootstrap,
                "seed": seed,
                "fit_space": "log",
            },
            "fit": asdict(fit),
            "bootstrap_95": intervals,
            "holdout": holdout,
            "scan_drop_top": scan.to_dict(orient="records"),
            "paper": PAPER,
            "figures": [str(path) for path in written],
        }
        click.echo(json.dumps(document, indent=2))
    else:
        click.echo(_report(fit, intervals, holdout, scan, drop_top, depth_offset, n_bootstrap))
        for path in written:
            click.echo(f"wrote {path}")


def _report(fit, intervals, holdout, scan, drop_top, depth_offset, n_bootstrap) -> str:
    lines = [
        f"Chinchilla shapes: {fit.n_rows} runs after dropping the K={drop_top} highest losses (ties included), "
        f"depth offset {depth_offset}; least squares on log L.",
        "",
        f"{'parameter':<10}{'fit':>8}{'SE':>8}   {'bootstrap 95 %':<18}paper",
    ]
    for name in REPORTED:
        low_high = f"[{intervals[name][0]:.3f}, {intervals[name][1]:.3f}]" if intervals else "(skipped)"
        value, error = PAPER[name]
        paper = f"{value:.2f}" + (f" ± {error:.2f}" if error else "")
        lines.append(f"{name:<10}{getattr(fit, name):>8.3f}{fit.stderr[name]:>8.3f}   {low_high:<18}{paper}")
    lines += [
        "",
        "SE: from the Jacobian at the optimum; bootstrap: "
        + (f"{n_bootstrap} resamples of the rows." if intervals else "skipped (--bootstrap 0)."),
        f"mean relative error {_percent(fit.mean_relative_error)} "
        f"(paper {_percent(PAPER['mean_relative_error'][0])}), rms of the log residual "
        f"{fit.rmse_log:.4f}",
        f"holdout over {holdout['splits']} random 80/20 splits: mean relative error "
        f"train {_percent(holdout['train_mean_relative_error'])}, "
        f"test {_percent(holdout['test_mean_relative_error'])}",
        "",
        "fit against K (runs dropped):",
        scan.assign(mean_relative_error=100 * scan.mean_relative_error)
        .rename(columns={"se_alpha_l": "SE alpha_l", "mean_relative_error": "mean rel. error %"})
        .to_string(index=False, float_format=lambda value: f"{value:.3f}"),
    ]
    return "\n".join(lines)


def _percent(fraction: float) -> str:
    return f"{100 * fraction:.3f} %"
