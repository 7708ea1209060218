"""The budget ladder: how fast each student still converges, and the loss it converges to.

A loss read at the end of one schedule is the best *that schedule* reached. The ladder trains the
last stage of a run again from the same start at k times its budget (`budget_rungs`, e.g. ×2 and
×4; runs/stages.py), so every student has three rungs L(B), L(2B), L(4B). With the moves
d₁ = L(B) − L(2B) and d₂ = L(2B) − L(4B), the ratio r = d₂/d₁ says how fast it converges, and where
the moves shrink geometrically (0 ≤ r < 1) the tail sums to the converged loss

    L∞ = L(4B) − d₂·r/(1 − r).

The test set's noise enters by resampling: each draw perturbs every rung's loss by its own standard
error, correlated across the rungs as their losses are over the pieces of the one test set they
share (`paired_rungs`: a move is measured on the same samples, so it is far less noisy than
either loss), and carries the draw through r, L∞ and every exponent. A student is *extrapolable* when at least 97.5 %
of the draws give a geometric tail (d₁ > 0, r < 1) that ends above zero; then L∞ has a 95 % interval.
Otherwise L(4B) is only an upper bound on its best loss, and an exponent that needs it is "not
extrapolable". A student whose two moves are both within the noise (|d| ≤ 2σ) is *flat*: L∞ = L(4B).

The exponents (`ladder_exponents`) are the log–log α over the run's depth window and the local
slopes between neighbouring depths, at every rung and at ∞, each with a 95 % interval that carries
both the teacher-to-teacher scatter (t over replicates, as `fitting.alpha_interval`) and the test
noise (the draws). The geometric tail is a model: an L∞ is only as good as r's constancy, which
three rungs cannot test.
"""

import numpy as np
import pandas as pd
from scipy import stats

from ..errors import ToymodelsError
from ..vocabulary import GROUP, SLOT
from .fitting import alpha_interval

DRAWS = 4000  # resamples of the test noise
CONFIDENCE = 0.95
FLAT_SIGMAS = 2.0  # a move within this many standard errors is no move
INFINITY = "inf"  # the rung label of the extrapolated loss


def rung_label(rung: int) -> str:
    return f"x{rung}"


def ladder_rungs(ladder: pd.DataFrame) -> list[int]:
    """The rungs a ladder table (one row per student, loss_x<k> columns) holds, in order."""
    return sorted(int(column.removeprefix("loss_x")) for column in ladder if column.startswith("loss_x"))


def correlation_column(first: int, second: int) -> str:
    return f"corr_{rung_label(first)}_{rung_label(second)}"


def paired_rungs(chunks: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """From each student's loss on each piece of the shared test set at every rung (`chunks`: SLOT,
    `rung`, `chunk`, `loss`, `steps`): per student and rung its test loss (the pieces' mean), relative
    standard error and steps; and per student the correlation of its rungs' losses over the pieces
    (columns corr_x1_x2, …)."""
    losses = chunks.pivot_table(index=[*SLOT, "chunk"], columns="rung", values="loss", dropna=False)
    rungs = sorted(losses.columns)
    summary, correlations = [], []
    for slot, pieces in losses.groupby(level=SLOT, dropna=False):
        values = pieces.to_numpy()
        mean, error = values.mean(0), values.std(0, ddof=1) / np.sqrt(len(values))
        matrix = np.corrcoef(values, rowvar=False)
        keys = dict(zip(SLOT, slot))
        summary += [{**keys, "rung": rung, "test_loss": mean[k], "relative_noise": error[k] / mean[k]}
                    for k, rung in enumerate(rungs)]
        correlations.append({**keys, **{correlation_column(a, b): matrix[i, j] for i, a in enumerate(rungs)
                                        for j, b in enumerate(rungs) if i < j}})
    steps = chunks.groupby([*SLOT, "rung"], dropna=False).steps.first().reset_index()
    table = pd.DataFrame(summary).merge(steps, on=[*SLOT, "rung"], how="left")
    return table, pd.DataFrame(correlations)


def correlation_matrices(table: pd.DataFrame, rungs: list[int]) -> np.ndarray:
    """(students, rungs, rungs) correlation matrices from the corr_x<a>_x<b> columns of `table`
    (one row per student); the identity where a table has none (rungs taken as independent)."""
    matrices = np.tile(np.eye(len(rungs)), (len(table), 1, 1))
    for i, a in enumerate(rungs):
        for j, b in enumerate(rungs[i + 1:], i + 1):
            if correlation_column(a, b) in table:
                matrices[:, i, j] = matrices[:, j, i] = table[correlation_column(a, b)].to_numpy()
    return matrices


def loss_draws(losses: np.ndarray, noises: np.ndarray, rng: np.random.Generator, draws: int = DRAWS,
               correlations: np.ndarray | None = None) -> np.ndarray:
    """Draws of the losses (students, rungs) with relative standard errors `noises`, correlated
    across rungs by `correlations` (students, rungs, rungs; None: independent): (draws, students, rungs)."""
    normal = rng.standard_normal((draws, *losses.shape))
    if correlations is not None:
        factors = np.linalg.cholesky(correlations + 1e-9 * np.eye(losses.shape[-1]))
        normal = np.einsum("sij,dsj->dsi", factors, normal)
    return losses * (1 + noises * normal)


def tail(losses: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """r = d₂/d₁ and L∞ of the last three rungs (last axis) of `losses`, and whether each is a
    geometric tail that ends above zero (d₁ > 0, r < 1, L∞ > 0); L∞ is NaN where it is not.
    r < 0 (the last move went up) is read as a converged tail: L∞ = L(4B)."""
    first, second, last = losses[..., -3], losses[..., -2], losses[..., -1]
    d1, d2 = first - second, second - last
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = d2 / d1
        shrinking = np.clip(ratio, 0, None)
        limit = last - d2 * shrinking / (1 - shrinking)
    valid = (d1 > 0) & (ratio < 1) & (limit > 0)
    return ratio, np.where(valid, limit, np.nan), valid


def extrapolate(rungs: pd.DataFrame, correlations: pd.DataFrame | None = None,
                rng: np.random.Generator | None = None) -> pd.DataFrame:
    """Per student of `rungs` (SLOT, `rung`, `test_loss`, `relative_noise`, `steps`): its rungs' losses
    side by side (loss_x1, …), their correlations (`correlations`, as `paired_rungs` gives them; None:
    independent), its convergence ratio r with a 95 % interval, its L∞ with one, and its `status`:
    flat, extrapolated or not extrapolable (module docstring)."""
    rng = rng or np.random.default_rng(0)
    order = sorted(rungs.rung.unique())
    if len(order) < 3:
        raise ToymodelsError(f"the ladder needs three rungs (the budget, and two multiples of it); these runs have "
                             f"{', '.join(map(rung_label, order))}")
    wide = rungs.pivot_table(index=SLOT, columns="rung", values=["test_loss", "relative_noise", "steps"],
                             dropna=False)
    wide = wide.dropna(how="all")
    losses, noises = wide.test_loss[order].to_numpy(), wide.relative_noise[order].to_numpy()
    table = wide.index.to_frame(index=False)
    if correlations is not None:
        table = table.merge(correlations, on=SLOT, how="left")
    matrices = correlation_matrices(table, order)
    ratio, limit, _ = tail(losses)
    draws = loss_draws(losses, noises, rng, correlations=matrices)
    ratio_draws, limit_draws, valid = tail(draws)
    tail_alpha = (1 - CONFIDENCE) / 2
    moves = -np.diff(draws[..., -3:], axis=-1)  # d₁, d₂ in every draw: their spread is each move's noise
    flat = (np.abs(-np.diff(losses[:, -3:], axis=-1)) <= FLAT_SIGMAS * moves.std(axis=0)).all(axis=-1)
    extrapolable = valid.mean(axis=0) >= 1 - tail_alpha
    for k, rung in enumerate(order):
        table[f"loss_{rung_label(rung)}"] = losses[:, k]
        table[f"noise_{rung_label(rung)}"] = noises[:, k]
        table[f"steps_{rung_label(rung)}"] = wide.steps[rung].to_numpy()
    table["r"] = ratio
    table["r_low"], table["r_high"] = np.nanquantile(ratio_draws, [tail_alpha, 1 - tail_alpha], axis=0)
    table["status"] = np.where(flat, "flat", np.where(extrapolable, "extrapolated", "not extrapolable"))
    low, high = np.full(len(table), np.nan), np.full(len(table), np.nan)
    if extrapolable.any():  # quantiles only where a tail exists (elsewhere every draw is NaN)
        low[extrapolable], high[extrapolable] = np.nanquantile(limit_draws[:, extrapolable], [tail_alpha, 1 - tail_alpha],
                                                               axis=0)
    last_draws = draws[..., -1]
    last_low, last_high = np.quantile(last_draws, [tail_alpha, 1 - tail_alpha], axis=0)
    table["loss_inf"] = np.select([flat, extrapolable], [losses[:, -1], limit], np.nan)
    table["loss_inf_low"] = np.select([flat, extrapolable], [last_low, low], np.nan)
    table["loss_inf_high"] = np.select([flat, extrapolable], [last_high, high], np.nan)
    return table


def limit_draws(ladder: pd.DataFrame, rungs: list[int], rng: np.random.Generator) -> np.ndarray:
    """Draws of every student's L∞ (draws, students), as `extrapolate` makes them: a flat student's
    its last rung's draw; NaN where a draw has no geometric tail."""
    labels = [rung_label(rung) for rung in rungs]
    losses = ladder[[f"loss_{label}" for label in labels]].to_numpy()
    noises = ladder[[f"noise_{label}" for label in labels]].to_numpy()
    draws = loss_draws(losses, noises, rng, correlations=correlation_matrices(ladder, rungs))
    limits = tail(draws)[1]
    return np.where((ladder.status == "flat").to_numpy(), draws[..., -1], limits)


def exponent_interval(depths, point: np.ndarray, draws: np.ndarray) -> tuple[float, float, float, str]:
    """α of log losses `point` (replicates, depths) and its 95 % interval, from `draws` of them
    (draws, replicates, depths): each draw's α plus a t deviate of its replicate scatter
    (fitting.alpha_interval), so the interval carries the test noise and the teachers' scatter."""
    estimate = alpha_interval(depths, point)
    sampled = alpha_interval(depths, draws)
    replicates, count = point.shape
    freedom = replicates - 1 if replicates >= 2 else count - 2
    scatter = np.zeros(len(draws))
    if freedom >= 1:
        half = np.nan_to_num(sampled.high - sampled.alpha)  # a draw with no spread adds none
        scatter = half / stats.t.ppf(0.975, freedom) * stats.t.rvs(freedom, size=len(draws), random_state=1)
    predictive = sampled.alpha + scatter
    tail_alpha = (1 - CONFIDENCE) / 2
    low, high = np.quantile(predictive[np.isfinite(predictive)], [tail_alpha, 1 - tail_alpha])
    method = (f"{estimate.method}, and the test noise resampled" if freedom >= 1
              else "the test noise resampled alone (one replicate, two depths)")
    return float(np.mean(estimate.alpha)), float(low), float(high), method


def ladder_exponents(ladder: pd.DataFrame, min_depth: int = 1, rng: np.random.Generator | None = None) -> pd.DataFrame:
    """Per group (teacher, temperature) and rung (x1, x2, …, and inf): α over the depths ≥ `min_depth`
    (`window` "6–48") and each local slope (`window` "32–48"), with 95 % intervals; at inf only where
    every student it needs is flat or extrapolated, else `alpha` is NaN and `note` names the others."""
    rng = rng or np.random.default_rng(1)
    rungs = ladder_rungs(ladder)
    rows = []
    for group, students in ladder[ladder.depth >= min_depth].groupby(GROUP, dropna=False, sort=True):
        students = students.sort_values(["replicate", "depth"])
        depths = np.sort(students.depth.unique())
        replicates = students.replicate.nunique()
        if len(students) != replicates * len(depths):
            raise ToymodelsError(f"the ladder of {group[0]} lacks students: every replicate needs every depth")
        shape = (replicates, len(depths))
        limits = limit_draws(students, rungs, rng)
        series = {rung_label(rung): (students[f"loss_{rung_label(rung)}"].to_numpy(),
                                     loss_draws(students[f"loss_{rung_label(rung)}"].to_numpy(),
                                                students[f"noise_{rung_label(rung)}"].to_numpy(), rng))
                  for rung in rungs}
        series[INFINITY] = (students.loss_inf.to_numpy(), limits)
        windows = [(f"{depths[0]}–{depths[-1]}", slice(None))]
        windows += [(f"{a}–{b}", slice(k, k + 2)) for k, (a, b) in enumerate(zip(depths[:-1], depths[1:]))]
        for label, (point, draws) in series.items():
            point, draws = np.log(point).reshape(shape), np.log(draws).reshape(len(draws), *shape)
            for window, columns in windows:
                base = {"teacher": group[0], "temperature": group[1], "rung": label, "window": window,
                        "replicates": replicates}
                missing = ~np.isfinite(point[:, columns]).all(axis=0)
                if missing.any():
                    lacking = ", ".join(f"ℓ={d}" for d in depths[columns][missing])
                    rows.append({**base, "alpha": np.nan, "alpha_low": np.nan, "alpha_high": np.nan,
                                 "method": "", "note": f"not extrapolable at {lacking}"})
                    continue
                alpha, low, high, method = exponent_interval(depths[columns], point[:, columns], draws[:, :, columns])
                rows.append({**base, "alpha": alpha, "alpha_low": low, "alpha_high": high, "method": method,
                             "note": ""})
    return pd.DataFrame(rows)


def ladder_lines(ladder: pd.DataFrame, exponents: pd.DataFrame) -> str:
    """The ladder as a user reads it: per group, each depth's rungs, r and L∞, then α at every rung."""
    rungs = ladder_rungs(ladder)
    lines = []
    for (teacher, temperature), students in ladder.groupby(GROUP, dropna=False, sort=True):
        name = teacher if pd.isna(temperature) else f"{teacher} T={temperature:g}"
        lines.append(f"{name}: budget ladder ×{', ×'.join(map(str, rungs))} (geometric mean over "
                     f"{students.replicate.nunique()} replicate(s); r = (L(×{rungs[-2]}) − L(×{rungs[-1]})) / "
                     f"(L(×{rungs[-3]}) − L(×{rungs[-2]})))")
        header = "  ℓ   " + "".join(f"{'×' + str(rung):>11}" for rung in rungs) + "   r (per replicate)        L∞ [95 %]"
        lines.append(header)
        for depth, rows in students.groupby("depth", sort=True):
            losses = "".join(f"{np.exp(np.log(rows[f'loss_{rung_label(rung)}']).mean()):>11.3e}" for rung in rungs)
            ratios = ", ".join(f"{r:.2f}" for r in rows.r)
            limits = "; ".join(f"{row.loss_inf:.2e} [{row.loss_inf_low:.2e}, {row.loss_inf_high:.2e}]"
                               if np.isfinite(row.loss_inf) else row.status for row in rows.itertuples())
            lines.append(f"  {depth:<4}{losses}   {ratios:<24} {limits}")
        rows = exponents[(exponents.teacher == teacher) & (exponents.temperature.isna() if pd.isna(temperature)
                                                           else exponents.temperature == temperature)]
        for window, by_rung in rows.groupby("window", sort=False):
            cells = [f"{row.rung} {row.alpha:.2f} [{row.alpha_low:.2f}, {row.alpha_high:.2f}]" if np.isfinite(row.alpha)
                     else f"{row.rung} – ({row.note})" for row in by_rung.itertuples()]
            lines.append(f"  α over ℓ {window}: " + "; ".join(cells))
    return "\n".join(lines)
