"""Fits of a run as a table for people (terminal, summary.txt) and as a document for programs (--json)."""

import math

import pandas as pd

from .config import SweepConfig
from .fitting import CONVERGENCE_TOLERANCE, DepthFit


def protocol_line(config: SweepConfig) -> str:
    """Never quote an α without its protocol."""
    lr = f"lr {config.lr:g}" + (f"/ℓ^{config.lr_depth_exponent:g}" if config.lr_depth_exponent else "")
    lr += "".join(f", {rate:g} at ℓ={depth}" for depth, rate in config.depth_lr)
    return (f"{config.loss} loss, {config.student} students, teacher depth {config.teacher_depth}, "
            f"{config.steps} steps × batch {config.batch}, {lr} ({config.schedule}), "
            f"{config.replicates} replicate(s), seed {config.seed}"
            + (f", {config.precision} matmuls" if config.precision != "fp32" else ""))


def temperature_label(temperature: float) -> str:
    """MSE runs have no temperature (NaN in the tidy data): shown as a dash."""
    return "—" if math.isnan(temperature) else f"{temperature:.3g}"


def summary_table(fits: list[DepthFit]) -> pd.DataFrame:
    """One row per (teacher, temperature): the final loss at each depth, α and its interval."""
    rows = []
    for fit in fits:
        row = {"teacher": fit.teacher, "temperature": fit.temperature}
        row.update({f"loss_depth_{d}": loss for d, loss in zip(fit.depths, fit.losses)})
        row.update(alpha=fit.alpha, alpha_low=fit.alpha_low, alpha_high=fit.alpha_high,
                   replicates=fit.replicates, steps=fit.steps, converged=fit.converged,
                   not_converged_depths=" ".join(map(str, fit.not_converged_depths)),
                   diverged=" ".join(f"{d['depth']}:r{d['replicate']}@{d['step']}" for d in fit.diverged))
        rows.append(row)
    return pd.DataFrame(rows)


def fit_flags(fit: DepthFit) -> list[str]:
    """What a reader must know before trusting the row's α."""
    flags = []
    if fit.diverged:
        flags.append("diverged, left out: " + ", ".join(f"ℓ={d['depth']} r{d['replicate']} at step {d['step']}"
                                                         for d in fit.diverged))
    if fit.excluded_depths:
        flags.append("ℓ=" + ",".join(map(str, fit.excluded_depths)) + " not fitted (a replicate lacks it)")
    if not fit.converged:
        flags.append("not converged (ℓ=" + ",".join(map(str, fit.not_converged_depths)) + ")")
    return flags


def format_table(fits: list[DepthFit], config: SweepConfig, tolerance=CONVERGENCE_TOLERANCE) -> str:
    depths = sorted({d for fit in fits for d in fit.depths})
    header = ["teacher", "T"] + [f"ℓ={d}" for d in depths] + ["α_ℓ", "95% interval", ""]
    lines = []
    for fit in fits:
        loss_at = dict(zip(fit.depths, fit.losses))
        flag = "; ".join(fit_flags(fit))
        lines.append([fit.teacher, temperature_label(fit.temperature)]
                     + [f"{loss_at[d]:.3e}" if d in loss_at else "" for d in depths]
                     + [f"{fit.alpha:.2f}", f"[{fit.alpha_low:.2f}, {fit.alpha_high:.2f}]", flag])
    widths = [max(len(row[i]) for row in [header] + lines) for i in range(len(header))]
    text = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in [header] + lines]
    intervals = sorted({fit.interval for fit in fits})
    text.append(f"final test loss (geometric mean over replicates); α_ℓ from a log–log fit, interval: "
                f"{'; '.join(intervals)}")
    text.append(f"not converged: test loss still fell by more than {tolerance:.0%} over the last 10 % of training")
    text.append(f"protocol: {protocol_line(config)}")
    return "\n".join(text)


def fit_document(fits: list[DepthFit], config: SweepConfig) -> dict:
    """Everything `toymodels fit --json` prints: the protocol and each fit, α over training included."""
    return {"protocol": {**vars(config), "summary": protocol_line(config)}, "fits": [f.as_dict() for f in fits]}
