"""The converged exponents by more than one tail model, each judged by how well it fits the rungs.

A budget ladder's rungs L(B), L(2B), … fall toward each student's best loss, but the curve they
follow there is a model, and a model chosen after the fact can say 2 or 3 (science.md §12: the
families fitted to the tied ladder put α∞ anywhere in 2.8–3.0). So the suite fits several, judges
each by its fit to the rungs it describes under the rungs' paired noise (the pieces of the one
test set they share make their losses move together: `ladder.noise_model`), and quotes the span
of the families that pass:

- `geometric`: the suite's own tail (`ladder.extrapolate`): the last two ratios of the moves agree
  within their intervals, L∞ from r drawn between them; judged student by student there.
- `power law`: L(B) = L∞ + A·(B/B_last)^−β per student, by generalised least squares on its last
  `FIT_RUNGS` rungs with β profiled (a geometric series in the rung index is the same curve: this
  family reads all four rungs at once instead of the last two ratios).
- `α series`: the exponent itself at the last FIT_RUNGS rungs that trained the window's depths,
  α(B) = α∞ − C·(B/B_last)^−β, extrapolated directly (and p alike); its noise is the joint
  resampling of every rung's test losses.

Three parameters on four rungs leave one degree of freedom per series; the series a window needs
(its students, or its teachers for the α series) are judged together: their summed χ² against its
95 % point, and every one of them must have a tail (moves that shrink, a limit above zero where a
loss is the limit, in 97.5 % of the draws). The reason names where a family fails. α∞ and p∞ come
per teacher replicate and joined over the replicates (t over them, with the draws); the span runs
from the lowest lower end to the highest upper end of the passing families. Where none passes, the
last rung's α is a lower bound, not a limit.
"""

import numpy as np
import pandas as pd
from scipy import stats

from ..columns import GROUP
from .exponents import log_log_slopes, step_mismatch
from .ladder import (
    CONFIDENCE,
    DRAWS,
    EXTRAPOLATED,
    FLAT,
    contiguous_windows,
    exponent_interval,
    ladder_rungs,
    limit_draws,
    loss_draws,
    noise_model,
    rung_label,
)

GEOMETRIC, POWER_LAW, ALPHA_SERIES = "geometric", "power law", "α series"
SPAN = "span of the passing families"
FIT_RUNGS = 4  # three parameters and one degree of freedom to judge them by
RATIO_GRID = np.linspace(0.01, 0.97, 97)  # the tail's factor per doubling of the budget, 2^−β; ≥ 0.97 is no tail
TAIL_SHARE = (1 + CONFIDENCE) / 2  # the share of draws that must have a tail for the family to have one


def fit_tail(values: np.ndarray, covariance: np.ndarray, grid: np.ndarray = RATIO_GRID):
    """`values` (…, n) ≈ limit + amplitude·q^(k − n + 1), k = 0 … n − 1, by generalised least
    squares under `covariance` (n, n), with q profiled over `grid`: (limit, amplitude, q, χ²), each
    of shape (…). Linear in (limit, amplitude) at each q, so every q is one solve for all draws."""
    n = values.shape[-1]
    powers = grid[:, None] ** (np.arange(n) - n + 1.0)
    design = np.stack([np.ones_like(powers), powers], axis=-1)  # (q, n, 2)
    precision = np.linalg.inv(covariance)
    weighted = design.transpose(0, 2, 1) @ precision  # (q, 2, n)
    normal = weighted @ design  # (q, 2, 2)
    projector = np.linalg.solve(normal, weighted)  # (q, 2, n)
    coefficients = (values @ projector.reshape(-1, n).T).reshape(*values.shape[:-1], len(grid), 2)
    # the least-squares identity χ²_min = yᵀPy − ĉᵀ(XᵀPX)ĉ, without forming the residuals
    explained = (np.einsum("gjk,...gk->...gj", normal, coefficients) * coefficients).sum(axis=-1)
    chi2 = ((values @ precision) * values).sum(axis=-1)[..., None] - explained
    best = chi2.argmin(axis=-1)[..., None]
    limit, amplitude = (np.take_along_axis(coefficients[..., j], best, axis=-1)[..., 0] for j in (0, 1))
    return limit, amplitude, grid[best[..., 0]], np.take_along_axis(chi2, best, axis=-1)[..., 0]


def judged_tail(point: np.ndarray, draws: np.ndarray, covariance: np.ndarray, positive: bool):
    """One series' tail (`point`: n values, `draws`: (draws, n)): its limit, the limit's draws (NaN
    where a draw has no tail), its χ² and why it has no tail ('' where it has one): the moves do not
    shrink (q at the grid's end), a limit below 0 where it must be `positive`, or too few draws with
    a tail. The χ² is judged with the other series of a window (`fit_failure`)."""
    scale = np.abs(point[-1])
    limit, _, q, chi2 = fit_tail(point / scale, covariance / scale**2)
    limits, _, draw_q, _ = fit_tail(draws / scale, covariance / scale**2)
    valid = (draw_q < RATIO_GRID[-1]) & (limits > 0 if positive else True)
    limits = np.where(valid, limits * scale, np.nan)
    if q >= RATIO_GRID[-1]:
        reason = "no tail: the moves do not shrink"
    elif positive and limit <= 0:
        reason = "its limit is below zero"
    elif valid.mean() < TAIL_SHARE:
        reason = f"a tail in {valid.mean():.0%} of draws"
    else:
        reason = ""
    return float(limit * scale), limits, float(chi2), reason


def fit_failure(names: list[str], chi2: np.ndarray, reasons: list[str]) -> str:
    """Why a family fails over the series `names` ('' where it passes): a series without a tail, or
    their summed χ² (one degree of freedom each) beyond its 95 % point, naming the largest shares."""
    lacking = [f"{name}: {reason}" for name, reason in zip(names, reasons) if reason]
    if lacking:
        return "; ".join(lacking[:3]) + (f"; and {len(lacking) - 3} more" if len(lacking) > 3 else "")
    total, limit = float(np.sum(chi2)), float(stats.chi2.ppf(CONFIDENCE, len(chi2)))
    if total <= limit:
        return ""
    worst = np.argsort(chi2)[::-1][:3]
    return f"χ² {total:.1f} on {len(chi2)} dof (95 %: {limit:.1f}); most at " + ", ".join(
        f"{names[k]} ({chi2[k]:.1f})" for k in worst
    )


def last_rungs(row: np.ndarray) -> np.ndarray:
    """Indices of the last FIT_RUNGS finite entries of `row`."""
    return np.flatnonzero(np.isfinite(row))[-FIT_RUNGS:]


def power_law_limits(ladder: pd.DataFrame, rng: np.random.Generator):
    """Per student (row of `ladder`): L∞ of the power-law family, its draws (DRAWS, students), its
    χ² and why it has no tail ('' where it has one)."""
    rungs = ladder_rungs(ladder)
    losses = ladder[[f"loss_{rung_label(rung)}" for rung in rungs]].to_numpy()
    noises, correlations = noise_model(ladder, rungs)
    points, draws, chi2 = np.full(len(ladder), np.nan), np.full((DRAWS, len(ladder)), np.nan), np.zeros(len(ladder))
    reasons = []
    for i, row in enumerate(losses):
        columns = last_rungs(row)
        if len(columns) < FIT_RUNGS:
            reasons.append(f"{len(columns)} rungs: a three-parameter tail needs {FIT_RUNGS} to be judged")
            continue
        sigma = noises[i, columns] * row[columns]
        covariance = correlations[i][np.ix_(columns, columns)] * np.outer(sigma, sigma)
        sampled = loss_draws(
            row[None, columns],
            noises[None, i, columns],
            rng,
            correlations=correlations[None, i][:, columns][:, :, columns],
        )[:, 0]
        points[i], draws[:, i], chi2[i], reason = judged_tail(row[columns], sampled, covariance, positive=True)
        reasons.append(reason)
    return points, draws, chi2, reasons


def geometric_limits(ladder: pd.DataFrame, rng: np.random.Generator):
    """As `power_law_limits`, for the suite's geometric tail, which `ladder.extrapolate` judged
    student by student (its two ratios agree): no χ² of its own."""
    passes = ladder.status.isin([FLAT, EXTRAPOLATED]).to_numpy()
    reasons = ["" if ok else str(reason) for ok, reason in zip(passes, ladder.reason)]
    return (
        ladder.loss_inf.to_numpy(float),
        limit_draws(ladder, ladder_rungs(ladder), rng),
        np.zeros(len(ladder)),
        reasons,
    )


def measure_axes(depths: np.ndarray, teacher_depth: int | None) -> dict[str, np.ndarray]:
    """What each exponent is a slope against: α against ℓ, p against 1/u (u = 1/ℓ − 1/ℓ*, L ∝ u^p)."""
    return {"alpha": depths} | ({} if teacher_depth is None else {"p": 1 / step_mismatch(depths, teacher_depth)})


def window_depths(label: str, depths: np.ndarray) -> np.ndarray:
    low, high = (int(depth) for depth in label.split("–"))
    return depths[(depths >= low) & (depths <= high)]


def joined_interval(points: np.ndarray, draws: np.ndarray) -> tuple[float, float, float]:
    """The mean over replicates of `points` (replicates,) with its 95 % interval from `draws`
    (draws, replicates): each draw's mean plus a t deviate of the replicates' scatter."""
    mean = draws.mean(axis=1)
    if len(points) >= 2:
        spread = points.std(ddof=1) / np.sqrt(len(points))
        mean = mean + spread * stats.t.rvs(len(points) - 1, size=len(mean), random_state=2)
    return (float(points.mean()), *interval(mean))


def series_rows(students: pd.DataFrame, window: str, teacher_depth: int | None, rng: np.random.Generator) -> list[dict]:
    """The α-series family over `window` for one group: per replicate and joined, α∞ (and p∞)
    from the exponents at the last FIT_RUNGS rungs that trained every depth of the window."""
    rungs = ladder_rungs(students)
    depths = window_depths(window, np.sort(students.depth.unique()))
    students = students[students.depth.isin(depths)].sort_values(["replicate", "depth"])
    replicates = np.sort(students.replicate.unique())
    losses = students[[f"loss_{rung_label(rung)}" for rung in rungs]].to_numpy()
    trained = np.flatnonzero(np.isfinite(losses).all(axis=0))[-FIT_RUNGS:]
    if len(trained) < FIT_RUNGS:
        return [
            {
                "replicate": "joined",
                "measure": measure,
                "failure": f"{len(trained)} rungs trained every depth: a three-parameter tail needs {FIT_RUNGS}",
            }
            for measure in ("alpha", "p")
        ]
    noises, correlations = noise_model(students, rungs)
    draws = loss_draws(
        losses[:, trained], noises[:, trained], rng, correlations=correlations[:, trained][:, :, trained]
    )  # (draws, students, rungs)
    shape = (len(replicates), len(depths))
    rows = []
    for measure, axis in measure_axes(depths, teacher_depth).items():
        point = log_log_slopes(axis, np.log(losses[:, trained]).T.reshape(len(trained), *shape))  # (rungs, replicates)
        sampled = log_log_slopes(axis, np.log(draws).transpose(0, 2, 1).reshape(DRAWS, len(trained), *shape))
        fits = []
        for k in range(len(replicates)):
            covariance = np.cov(sampled[:, :, k], rowvar=False) + 1e-12 * np.eye(len(trained))
            fits.append(judged_tail(point[:, k], sampled[:, :, k], covariance, positive=False))
        limits, draws_by_replicate, chi2, reasons = (list(column) for column in zip(*fits))
        for replicate, limit, draws_k, chi2_k, reason in zip(replicates, limits, draws_by_replicate, chi2, reasons):
            low, high = interval(draws_k)
            rows.append(
                {
                    "replicate": str(replicate),
                    "measure": measure,
                    "value": limit,
                    "low": low,
                    "high": high,
                    "failure": fit_failure([f"r{replicate}"], np.array([chi2_k]), [reason]),
                }
            )
        value, low, high = joined_interval(np.array(limits), np.stack(draws_by_replicate, axis=1))
        rows.append(
            {
                "replicate": "joined",
                "measure": measure,
                "value": value,
                "low": low,
                "high": high,
                "failure": fit_failure([f"r{r}" for r in replicates], np.array(chi2), reasons),
            }
        )
    return rows


def interval(draws: np.ndarray) -> tuple[float, float]:
    """The central 95 % of `draws`, NaN where fewer than TAIL_SHARE of them have a tail."""
    finite = draws[np.isfinite(draws)]
    if len(finite) < TAIL_SHARE * len(draws):
        return np.nan, np.nan
    low, high = np.quantile(finite, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
    return float(low), float(high)


def limit_rows(ladder: pd.DataFrame, limits, window: str, teacher_depth: int | None) -> list[dict]:
    """α∞ and p∞ of an L∞ family over `window`, per replicate and joined (`ladder.exponent_interval`
    on its limits and their draws), with why it fails there ('' where it passes: `fit_failure` over
    the students it needs)."""
    points, draws, chi2, reasons = limits
    depths = window_depths(window, np.sort(ladder.depth.unique()))
    names = [f"ℓ={row.depth} r{row.replicate}" for row in ladder.itertuples()]
    rows = []
    for replicate in ["joined", *map(str, np.sort(ladder.replicate.unique()))]:
        mine = ladder.depth.isin(depths)
        if replicate != "joined":
            mine &= ladder.replicate.astype(str) == replicate
        members = np.flatnonzero(mine.to_numpy())  # sorted by replicate, then depth (tail_families sorts)
        failure = fit_failure([names[i] for i in members], chi2[members], [reasons[i] for i in members])
        shape = (len(members) // len(depths), len(depths))
        with np.errstate(invalid="ignore"):  # a limit below zero has no logarithm: NaN, no exponent
            point = np.log(points[members]).reshape(shape)
            sampled = np.log(draws[:, members]).reshape(len(draws), *shape)
        for measure, axis in measure_axes(depths, teacher_depth).items():
            value = low = high = np.nan
            if np.isfinite(point).all():
                value, low, high, _ = exponent_interval(axis, point, sampled)
            rows.append(
                {
                    "replicate": replicate,
                    "measure": measure,
                    "value": value,
                    "low": low,
                    "high": high,
                    "failure": failure or ("" if np.isfinite(value) else "no limit at every depth"),
                }
            )
    return rows


def last_rung_exponents(students: pd.DataFrame, window: str, teacher_depth: int | None) -> tuple[str, dict]:
    """The last rung that trained every depth of `window`, and α and p there per replicate and joined
    (the mean of the replicates'): the lower bounds where no family passes."""
    rungs = ladder_rungs(students)
    depths = window_depths(window, np.sort(students.depth.unique()))
    students = students[students.depth.isin(depths)]
    losses = students[[f"loss_{rung_label(rung)}" for rung in rungs]].to_numpy()
    last = np.flatnonzero(np.isfinite(losses).all(axis=0))[-1]
    replicates = np.sort(students.replicate.unique())
    log_losses = np.log(losses[:, last]).reshape(len(replicates), len(depths))
    values = {}
    for measure, axis in measure_axes(depths, teacher_depth).items():
        slopes = log_log_slopes(axis, log_losses)
        values |= {(str(r), measure): float(slope) for r, slope in zip(replicates, slopes)}
        values[("joined", measure)] = float(slopes.mean())
    return rung_label(rungs[last]), values


def tail_windows(students: pd.DataFrame, min_depth: int) -> list[str]:
    """The windows the families are read over: every depth from `min_depth`, and the longest runs of
    three or more neighbouring depths that the last rung trained at every replicate."""
    depths = np.sort(students.depth.unique())
    last = f"loss_{rung_label(ladder_rungs(students)[-1])}"
    on_last_rung = students.groupby("depth")[last].apply(lambda losses: losses.notna().all()).reindex(depths)
    windows = [f"{depths[0]}–{depths[-1]}"] if len(depths) >= 3 else []
    return windows + [label for label, _ in contiguous_windows(depths, on_last_rung.to_numpy())]


def tail_families(
    ladder: pd.DataFrame, min_depth: int = 1, teacher_depth: int | None = None, rng: np.random.Generator | None = None
) -> pd.DataFrame:
    """Per group, window (`tail_windows`), replicate ('joined' and each) and measure (α, and p with
    `teacher_depth`): each family's limit with its 95 % interval and `failure` ('' where it passes),
    and the span of the passing families (`family` = SPAN: NaN where none passes, with the last
    rung's value as `lower_bound`, a lower bound of the limit)."""
    rng = rng or np.random.default_rng(3)
    ladder = ladder[ladder.depth >= min_depth]
    rows = []
    for group, students in ladder.groupby(GROUP, dropna=False, sort=True):
        students = students.sort_values(["replicate", "depth"]).reset_index(drop=True)
        families = {GEOMETRIC: geometric_limits(students, rng), POWER_LAW: power_law_limits(students, rng)}
        for window in tail_windows(students, min_depth):
            base = {"teacher": group[0], "temperature": group[1], "window": window}
            found = [
                {**base, "family": family, **row}
                for family, limits in families.items()
                for row in limit_rows(students, limits, window, teacher_depth)
            ]
            found += [
                {**base, "family": ALPHA_SERIES, **row} for row in series_rows(students, window, teacher_depth, rng)
            ]
            rung, bounds = last_rung_exponents(students, window, teacher_depth)
            for (replicate, measure), same in pd.DataFrame(found).groupby(["replicate", "measure"], sort=False):
                passing = same[(same.failure == "") & same.low.notna()]
                found.append(
                    {
                        **base,
                        "family": SPAN,
                        "replicate": replicate,
                        "measure": measure,
                        "value": np.nan,
                        "low": passing.low.min(),
                        "high": passing.high.max(),
                        "failure": "" if len(passing) else "no family passes",
                        "passing": ", ".join(passing.family),
                        "lower_bound_rung": rung,
                        "lower_bound": bounds.get((replicate, measure), np.nan),
                    }
                )
            rows += found
    columns = [
        "teacher",
        "temperature",
        "window",
        "replicate",
        "measure",
        "family",
        "value",
        "low",
        "high",
        "failure",
        "passing",
        "lower_bound_rung",
        "lower_bound",
    ]
    return pd.DataFrame(rows).reindex(columns=columns)


MEASURE_NAMES = {"alpha": "α∞", "p": "p∞"}


def tail_lines(families: pd.DataFrame) -> str:
    """The families as a user reads them: per group, window and measure, the joined limit of each
    family with its interval and why it fails, then the span or, where none passes, the lower bound."""
    lines = []
    for (teacher, temperature, window, measure), rows in families[families.replicate == "joined"].groupby(
        ["teacher", "temperature", "window", "measure"], dropna=False, sort=False
    ):
        cells = []
        for row in rows[rows.family != SPAN].itertuples():
            value = (
                f"{row.value:.2f} [{row.low:.2f}, {row.high:.2f}]"
                if np.isfinite(row.low)
                else (f"{row.value:.2f}" if np.isfinite(row.value) else "–")
            )
            cells.append(f"{row.family} {value}" + (f" (fails: {row.failure})" if row.failure else " (passes)"))
        span = rows[rows.family == SPAN].iloc[0]
        verdict = (
            f"{span.low:.2f}–{span.high:.2f} over {span.passing}"
            if span.failure == ""
            else f"no family passes: {span.lower_bound:.2f} at {span.lower_bound_rung} is a lower bound"
        )
        name = teacher if pd.isna(temperature) else f"{teacher} T={temperature:g}"
        lines.append(f"{name}: {MEASURE_NAMES[measure]} over ℓ {window}, joined: {verdict}")
        lines += [f"  {cell}" for cell in cells]
    return "\n".join(lines)
