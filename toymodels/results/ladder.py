"""The budget ladder: how fast each student still converges, and the loss it converges to.

A loss read at the end of one schedule is the best *that schedule* reached. The ladder trains the
last stage of a run again from the same start at k times its budget (`budget_rungs`, e.g. ×2, ×4
and ×8; workflows/stages.py), so every student has rungs L(B), L(2B), L(4B), … With the moves
d_k = L(2^k·B) − L(2^(k+1)·B), each three neighbouring rungs give a convergence ratio
r = d_(k+1)/d_k, labelled by the triple's last rung (r_x4 from ×1, ×2, ×4; r_x8 from ×2, ×4, ×8).

Where the moves shrink geometrically the tail sums to the converged loss

    L∞ = L(last) − d_last·r/(1 − r).

But the geometric tail is a model, and r is a property of the budget as much as of the student
(science.md §11: from one triple to the next r moved by up to 0.7 at ℓ 6–48). So an L∞ is quoted
only where the model survives its own test: a student needs two ratios (four rungs), the two must
agree within their 95 % intervals, and the tail they give must end above zero with confidence.
Its interval carries the model's error as well as the test noise: each draw takes r uniformly
between the draw's two ratios, so the spread of r widens L∞. Elsewhere the student is "not
extrapolable" (with its `reason`) and L(last) is only an upper bound on its best loss. A student
whose last two moves are both within the noise (|d| ≤ 2σ) is *flat*: L∞ = L(last).

The test set's noise enters by resampling: each draw perturbs every rung's loss by its own standard
error, correlated across the rungs as their losses are over the pieces of the one test set they
share (`paired_rungs`: a move is measured on the same samples, so it is far less noisy than
either loss), and carries the draw through r, L∞ and every exponent. The test noise is not all:
the same protocol run again on another CPU gives the deep students other losses (its kernels round
float32 differently, and their noisy training carries the difference on: 0.3 % at ℓ 32–48 between
an Intel and an AMD machine, 1e-7 at ℓ 6–16). Where a run was made twice (`toymodels ladder
--repeat`), that spread (`rerun_spread`) enters every rung's noise too (`noise_model`).

The exponents (`ladder_exponents`) are, at every rung and at ∞, over the run's depth window, every
window of neighbouring depths that are all extrapolable, and between neighbouring depths: the
log–log α, the exponent p of the step mismatch u = 1/ℓ − 1/ℓ* (L ∝ u^p; a finite teacher's map
makes the log–log α read steeper than p near ℓ*), and the model-free slope of each student's loss
over the untrained Euler rule's at its depth against 1/u (0: the trained students keep the Euler
rule's law, p ≈ 2; −1: the paper's typical case, p ≈ 3). Each has a 95 % interval that carries
both the teacher-to-teacher scatter (t over replicates, as `exponents.alpha_interval`) and the draws.
"""

import numpy as np
import pandas as pd
from scipy import stats

from ..columns import GROUP, SLOT
from ..errors import ToymodelsError
from .exponents import alpha_interval, step_mismatch

DRAWS = 4000  # resamples of the test noise
CONFIDENCE = 0.95
FLAT_SIGMAS = 2.0  # a move within this many standard errors is no move
INFINITY = "inf"  # the rung label of the extrapolated loss
FLAT, EXTRAPOLATED, NOT_EXTRAPOLABLE = "flat", "extrapolated", "not extrapolable"


def rung_label(rung: int) -> str:
    return f"x{rung}"


def ratio_column(last_rung: int) -> str:
    """The ratio r of the three rungs ending at `last_rung` (r_x8: from ×2, ×4, ×8)."""
    return f"r_{rung_label(last_rung)}"


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
        summary += [
            {**keys, "rung": rung, "test_loss": mean[k], "relative_noise": error[k] / mean[k]}
            for k, rung in enumerate(rungs)
        ]
        correlations.append(
            {
                **keys,
                **{
                    correlation_column(a, b): matrix[i, j]
                    for i, a in enumerate(rungs)
                    for j, b in enumerate(rungs)
                    if i < j
                },
            }
        )
    steps = chunks.groupby([*SLOT, "rung"], dropna=False).steps.first().reset_index()
    table = pd.DataFrame(summary).merge(steps, on=[*SLOT, "rung"], how="left")
    return table, pd.DataFrame(correlations)


def correlation_matrices(table: pd.DataFrame, rungs: list[int]) -> np.ndarray:
    """(students, rungs, rungs) correlation matrices from the corr_x<a>_x<b> columns of `table`
    (one row per student). A pair the table does not hold (a rung grown after the others' students
    were deleted) is not independent: every rung is scored on the same test set, so its loss moves
    with the others' (0.94–0.98 between neighbouring rungs on the tied ladders). It takes ρ^g, ρ the
    student's mean measured correlation between neighbouring rungs and g how many doublings apart
    the two rungs are (how the measured ones fall with distance); the identity where a student has
    no measured pair. The matrices are made positive definite where the filled ones are not."""
    count = len(rungs)
    matrices = np.tile(np.eye(count), (len(table), 1, 1))
    measured = np.zeros((len(table), count, count), bool)
    for i, a in enumerate(rungs):
        for j, b in enumerate(rungs[i + 1 :], i + 1):
            if correlation_column(a, b) in table:
                values = table[correlation_column(a, b)].to_numpy(float)
                measured[:, i, j] = measured[:, j, i] = np.isfinite(values)
                matrices[:, i, j] = matrices[:, j, i] = np.nan_to_num(values)
    gaps = np.abs(np.log2(np.asarray(rungs, float))[:, None] - np.log2(np.asarray(rungs, float))[None, :])
    neighbours = measured & np.isclose(gaps, 1)[None]
    with np.errstate(invalid="ignore"):
        rho = np.where(neighbours, matrices, 0).sum(axis=(1, 2)) / neighbours.sum(axis=(1, 2))
    fill = ~measured & (gaps > 0)[None] & np.isfinite(rho)[:, None, None]
    matrices = np.where(fill, np.clip(np.nan_to_num(rho), 0, 1)[:, None, None] ** gaps[None], matrices)
    values, vectors = np.linalg.eigh(matrices)
    if (values < 1e-6).any():  # a measured block and a filled one need not make a valid matrix
        repaired = vectors @ (np.clip(values, 1e-6, None)[..., None] * vectors.transpose(0, 2, 1))
        scale = np.sqrt(np.diagonal(repaired, axis1=1, axis2=2))
        matrices = repaired / scale[:, :, None] / scale[:, None, :]
    return matrices


def noise_model(ladder: pd.DataFrame, rungs: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """Each student's relative noise at every rung (students, rungs) and its correlation across the
    rungs (students, rungs, rungs), from a ladder table: the test noise (noise_x<k>, corr_x<a>_x<b>),
    and where the table has one, the run-to-run spread (`rerun_spread`: the relative standard
    deviation of a loss between two runs of the same protocol, which the test noise does not see),
    independent from rung to rung."""
    noises = ladder[[f"noise_{rung_label(rung)}" for rung in rungs]].to_numpy()
    matrices = correlation_matrices(ladder, rungs)
    spread = ladder["rerun_spread"].fillna(0).to_numpy()[:, None] if "rerun_spread" in ladder else 0.0
    totals = np.sqrt(noises**2 + spread**2)
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.nan_to_num(noises / totals)
    matrices = matrices * scale[:, :, None] * scale[:, None, :]
    index = np.arange(len(rungs))
    matrices[:, index, index] = 1.0
    return totals, matrices


def rerun_spreads(ladder: pd.DataFrame, repeat: pd.DataFrame) -> pd.Series:
    """Per student of `ladder`, the run-to-run spread its rungs show against `repeat` (another
    ladder table of the same protocol, run again): the largest over the rungs both hold of
    |L_a − L_b| / (√2·mean), a standard deviation of one run's loss; NaN where they share none."""
    shared = [rung for rung in ladder_rungs(ladder) if f"loss_{rung_label(rung)}" in repeat]
    both = ladder[SLOT].merge(repeat[[*SLOT, *(f"loss_{rung_label(rung)}" for rung in shared)]], on=SLOT, how="left")
    differences = [
        np.abs(ladder[f"loss_{rung_label(rung)}"].to_numpy() - both[f"loss_{rung_label(rung)}"].to_numpy())
        / (
            np.sqrt(2)
            * (ladder[f"loss_{rung_label(rung)}"].to_numpy() + both[f"loss_{rung_label(rung)}"].to_numpy())
            / 2
        )
        for rung in shared
    ]
    return pd.Series(np.nanmax(differences, axis=0) if differences else np.nan, index=ladder.index)


def loss_draws(
    losses: np.ndarray,
    noises: np.ndarray,
    rng: np.random.Generator,
    draws: int | None = None,
    correlations: np.ndarray | None = None,
) -> np.ndarray:
    """Draws of the losses (students, rungs) with relative standard errors `noises`, correlated
    across rungs by `correlations` (students, rungs, rungs; None: independent): (draws, students,
    rungs); `draws` defaults to DRAWS."""
    normal = rng.standard_normal((draws or DRAWS, *losses.shape))
    if correlations is not None:
        factors = np.linalg.cholesky(correlations + 1e-9 * np.eye(losses.shape[-1]))
        normal = np.einsum("sij,dsj->dsi", factors, normal)
    return losses * (1 + noises * normal)


def ratios(losses: np.ndarray) -> np.ndarray:
    """r of every three neighbouring rungs (last axis): (…, rungs − 2), d_(k+1)/d_k."""
    moves = -np.diff(losses, axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return moves[..., 1:] / moves[..., :-1]


def geometric_limit(losses: np.ndarray, ratio: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """L∞ = L(last) − d_last·r/(1 − r) and whether it is a geometric tail that ends above zero
    (the moves it rests on positive, r < 1, L∞ > 0); r < 0 (the last move went up) reads as a
    converged tail, L∞ = L(last). L∞ is NaN where it is not a tail."""
    moves = -np.diff(losses, axis=-1)
    shrinking = np.clip(ratio, 0, None)
    with np.errstate(divide="ignore", invalid="ignore"):
        limit = losses[..., -1] - moves[..., -1] * shrinking / (1 - shrinking)
    needed = moves[..., :-1] if losses.shape[-1] > 3 else moves[..., -2:-1]  # every move a ratio divides by
    valid = (needed > 0).all(axis=-1) & (ratio < 1) & (limit > 0)
    return np.where(valid, limit, np.nan), valid


def tail(losses: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """r and L∞ of the last three rungs (last axis) of `losses`, and whether each is a geometric
    tail that ends above zero; the one-ratio model, which a fourth rung tests (`tail_samples`)."""
    ratio = ratios(losses[..., -3:])[..., 0]
    limit, valid = geometric_limit(losses[..., -3:], ratio)
    return ratio, limit, valid


def tail_samples(losses: np.ndarray, noises: np.ndarray, correlations: np.ndarray, rng: np.random.Generator):
    """For students that share their rungs (`losses`, `noises`: students × rungs ≥ 4): draws of
    the losses (draws, students, rungs), of every ratio (…, rungs − 2), and of L∞ with r drawn
    uniformly between the draw's last two ratios (NaN where a draw has no tail)."""
    draws = loss_draws(losses, noises, rng, correlations=correlations)
    ratio_draws = ratios(draws)
    previous, last = ratio_draws[..., -2], ratio_draws[..., -1]
    between = previous + rng.uniform(size=last.shape) * (last - previous)
    limits, _ = geometric_limit(draws, between)
    return draws, ratio_draws, limits


def student_tails(
    losses: np.ndarray, noises: np.ndarray, correlations: np.ndarray, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Per student of one rung count (module docstring): each ratio with its interval, the
    status and its reason, L∞ with its interval."""
    tail_alpha = (1 - CONFIDENCE) / 2
    count = losses.shape[-1]
    point_ratios = ratios(losses)
    if count >= 4:
        draws, ratio_draws, limits = tail_samples(losses, noises, correlations, rng)
    else:
        draws = loss_draws(losses, noises, rng, correlations=correlations)
        ratio_draws, limits = ratios(draws), np.full(draws.shape[:-1], np.nan)
    with np.errstate(invalid="ignore"):
        low, high = np.nanquantile(ratio_draws, [tail_alpha, 1 - tail_alpha], axis=0)
    moves = -np.diff(draws[..., -3:], axis=-1)  # the last two moves in every draw: their spread is their noise
    flat = (np.abs(-np.diff(losses[:, -3:], axis=-1)) <= FLAT_SIGMAS * moves.std(axis=0)).all(axis=-1)
    tails = np.isfinite(limits).mean(axis=0) >= 1 - tail_alpha
    if count >= 4:
        agree = (low[:, -1] <= high[:, -2]) & (low[:, -2] <= high[:, -1])
        limit, _ = geometric_limit(losses, np.mean(point_ratios[:, -2:], axis=-1))
        reason = np.where(
            ~agree,
            [f"r drifts: {a:.2f} → {b:.2f}, intervals apart" for a, b in point_ratios[:, -2:]],
            "the moves do not shrink to a tail above zero",
        )
    else:
        agree, limit = np.zeros(len(losses), bool), np.full(len(losses), np.nan)
        reason = np.full(len(losses), "one ratio: a fourth rung tests the tail")
    extrapolated = agree & tails & np.isfinite(limit) & ~flat
    limit_low, limit_high = np.full(len(losses), np.nan), np.full(len(losses), np.nan)
    if extrapolated.any():  # quantiles only where a tail exists (elsewhere every draw is NaN)
        limit_low[extrapolated], limit_high[extrapolated] = np.nanquantile(
            limits[:, extrapolated], [tail_alpha, 1 - tail_alpha], axis=0
        )
    last_low, last_high = np.quantile(draws[..., -1], [tail_alpha, 1 - tail_alpha], axis=0)
    status = np.select([flat, extrapolated], [FLAT, EXTRAPOLATED], NOT_EXTRAPOLABLE)
    return {
        "ratios": point_ratios,
        "ratios_low": low,
        "ratios_high": high,
        "status": status,
        "reason": np.select([flat, extrapolated], ["the last two moves within the noise", ""], reason),
        "loss_inf": np.select([flat, extrapolated], [losses[:, -1], limit], np.nan),
        "loss_inf_low": np.select([flat, extrapolated], [last_low, limit_low], np.nan),
        "loss_inf_high": np.select([flat, extrapolated], [last_high, limit_high], np.nan),
    }


def rung_counts(losses: np.ndarray, rungs: list[int], table: pd.DataFrame) -> np.ndarray:
    """How many rungs each student has, from ×1 on; raises ToymodelsError where a student lacks a
    rung below one it has, or has fewer than three."""
    counts = np.isfinite(losses).sum(axis=1)
    gaps = np.isfinite(losses) != (np.arange(len(rungs)) < counts[:, None])
    short = counts < 3
    for problem, text in ((gaps, "lacks a rung below its last"), (short, "has fewer than three rungs")):
        rows = np.flatnonzero(problem if problem.ndim == 1 else problem.any(axis=1))
        if len(rows):
            student = table.iloc[rows[0]]
            raise ToymodelsError(
                f"the ladder's student {student.teacher} replicate {student.replicate} ℓ={student.depth} "
                f"{text}: every student needs ×{', ×'.join(map(str, rungs[:3]))} at least"
            )
    return counts


def extrapolate(
    rungs: pd.DataFrame, correlations: pd.DataFrame | None = None, rng: np.random.Generator | None = None
) -> pd.DataFrame:
    """Per student of `rungs` (SLOT, `rung`, `test_loss`, `relative_noise`, `steps`): its rungs' losses
    side by side (loss_x1, …), their correlations (`correlations`, as `paired_rungs` gives them; None:
    independent), every ratio r_x<k> with a 95 % interval (`r`: the last), its L∞ with one, and its
    `status` (flat, extrapolated or not extrapolable) with its `reason` (module docstring). Students
    of a joined ladder may have different rung counts (a part one rung further): each uses its own."""
    rng = rng or np.random.default_rng(0)
    order = sorted(rungs.rung.unique())
    if len(order) < 3:
        raise ToymodelsError(
            f"the ladder needs three rungs (the budget, and two multiples of it); these runs have "
            f"{', '.join(map(rung_label, order))}"
        )
    wide = rungs.pivot_table(index=SLOT, columns="rung", values=["test_loss", "relative_noise", "steps"], dropna=False)
    wide = wide.dropna(how="all")
    losses, noises = wide.test_loss[order].to_numpy(), wide.relative_noise[order].to_numpy()
    table = wide.index.to_frame(index=False)
    if correlations is not None:
        table = table.merge(correlations, on=SLOT, how="left")
    counts = rung_counts(losses, order, table)
    for k, rung in enumerate(order):
        table[f"loss_{rung_label(rung)}"] = losses[:, k]
        table[f"noise_{rung_label(rung)}"] = noises[:, k]
        table[f"steps_{rung_label(rung)}"] = wide.steps[rung].to_numpy()
    if "rerun_spread" in rungs:
        table = table.merge(rungs.groupby(SLOT, dropna=False).rerun_spread.max().reset_index(), on=SLOT, how="left")
    noises, matrices = noise_model(table, order)
    columns = {
        name: np.full(len(table), np.nan, dtype=object if name in ("status", "reason") else float)
        for name in ("r", "r_low", "r_high", "status", "reason", "loss_inf", "loss_inf_low", "loss_inf_high")
    }
    ratio_columns = {
        name: np.full(len(table), np.nan)
        for rung in order[2:]
        for name in (ratio_column(rung), f"{ratio_column(rung)}_low", f"{ratio_column(rung)}_high")
    }
    for count in np.unique(counts):
        members = counts == count
        tails = student_tails(
            losses[members, :count], noises[members, :count], matrices[members][:, :count, :count], rng
        )
        for k, rung in enumerate(order[2:count]):
            for suffix, key in (("", "ratios"), ("_low", "ratios_low"), ("_high", "ratios_high")):
                ratio_columns[ratio_column(rung) + suffix][members] = tails[key][:, k]
        for suffix, key in (("", "ratios"), ("_low", "ratios_low"), ("_high", "ratios_high")):
            columns["r" + suffix][members] = tails[key][:, -1]
        for name in ("status", "reason", "loss_inf", "loss_inf_low", "loss_inf_high"):
            columns[name][members] = tails[name]
    return table.assign(**ratio_columns, **columns)


def limit_draws(ladder: pd.DataFrame, rungs: list[int], rng: np.random.Generator) -> np.ndarray:
    """Draws of every student's L∞ (draws, students), as `extrapolate` makes them: a flat student's
    its last rung's draw; NaN where a draw has no tail, or the student is not extrapolable."""
    losses = ladder[[f"loss_{rung_label(rung)}" for rung in rungs]].to_numpy()
    noises, matrices = noise_model(ladder, rungs)
    counts = np.isfinite(losses).sum(axis=1)
    result = np.full((DRAWS, len(ladder)), np.nan)
    for count in np.unique(counts):
        members = counts == count
        if count >= 4:
            draws, _, limits = tail_samples(
                losses[members, :count], noises[members, :count], matrices[members][:, :count, :count], rng
            )
        else:
            draws = loss_draws(
                losses[members, :count], noises[members, :count], rng, correlations=matrices[members][:, :count, :count]
            )
            limits = np.full(draws.shape[:-1], np.nan)
        status = ladder.status.to_numpy()[members]
        result[:, members] = np.where(status == FLAT, draws[..., -1], np.where(status == EXTRAPOLATED, limits, np.nan))
    return result


def exponent_interval(depths, point: np.ndarray, draws: np.ndarray) -> tuple[float, float, float, str]:
    """α of log losses `point` (replicates, depths) and its 95 % interval, from `draws` of them
    (draws, replicates, depths): each draw's α plus a t deviate of its replicate scatter
    (exponents.alpha_interval), so the interval carries the test noise and the teachers' scatter."""
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
    method = (
        f"{estimate.method}, and the test noise resampled"
        if freedom >= 1
        else "the test noise resampled alone (one replicate, two depths)"
    )
    return float(np.mean(estimate.alpha)), float(low), float(high), method


def contiguous_windows(depths: np.ndarray, selected: np.ndarray) -> list[tuple[str, slice]]:
    """Every longest run of ≥ 3 neighbouring depths that are all `selected`, but the whole."""
    windows, start = [], None
    for k, ok in enumerate([*selected, False]):
        if ok and start is None:
            start = k
        elif not ok and start is not None:
            if k - start >= 3 and k - start < len(depths):
                windows.append((f"{depths[start]}–{depths[k - 1]}", slice(start, k)))
            start = None
    return windows


def ladder_exponents(
    ladder: pd.DataFrame, min_depth: int = 1, teacher_depth: int | None = None, rng: np.random.Generator | None = None
) -> pd.DataFrame:
    """Per group (teacher, temperature) and rung (x1, x2, …, and inf), over the depths ≥ `min_depth`
    (`window` "6–48"), the depths the last rung trained (`rung_depth_limits`: "6–24" where ×16 stops
    there), every longest window of ≥ 3 neighbouring depths extrapolable at every
    replicate, every such window whose last moves shrink with confidence (r's interval below 1 at
    every replicate: the students nearest their tails), and between neighbouring depths ("32–48"):
    the log–log `alpha`; with `teacher_depth`,
    `p` in the step mismatch u = 1/ℓ − 1/ℓ*, and where the ladder holds the untrained Euler rule's
    loss (`reference_loss`) the `discretisation_slope` of log(L/L_Euler) against log(1/u); each with
    a 95 % interval. At inf only where every student it needs is flat or extrapolated, else NaN and
    `note` names the others."""
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
        noises = noise_model(students, rungs)[0]
        series = {
            rung_label(rung): (
                students[f"loss_{rung_label(rung)}"].to_numpy(),
                loss_draws(students[f"loss_{rung_label(rung)}"].to_numpy(), noises[:, k], rng),
            )
            for k, rung in enumerate(rungs)
        }
        series[INFINITY] = (students.loss_inf.to_numpy(), limit_draws(students, rungs, rng))
        extrapolable = np.isfinite(students.loss_inf.to_numpy()).reshape(shape).all(axis=0)
        shrinking = (students.r_high.to_numpy() < 1).reshape(shape).all(axis=0)  # the last moves shrink, surely
        on_every_rung = np.isfinite(students[f"loss_{rung_label(rungs[-1])}"].to_numpy()).reshape(shape).all(axis=0)
        windows = [(f"{depths[0]}–{depths[-1]}", slice(None))]
        for window in [
            *contiguous_windows(depths, on_every_rung),
            *contiguous_windows(depths, extrapolable),
            *contiguous_windows(depths, shrinking),
        ]:
            windows += [window] if window[0] not in [label for label, _ in windows] else []
        windows += [
            (f"{a}–{b}", slice(k, k + 2))
            for k, (a, b) in enumerate(zip(depths[:-1], depths[1:]))
            if f"{a}–{b}" not in [label for label, _ in windows]
        ]  # two depths: the pair is the whole
        steps = None if teacher_depth is None else 1 / step_mismatch(depths, teacher_depth)  # L ∝ u^p = (1/u)^−p
        reference = (
            np.log(students.reference_loss.to_numpy()).reshape(shape)
            if "reference_loss" in students and students.reference_loss.notna().all()
            else None
        )
        for label, (point, draws) in series.items():
            point, draws = np.log(point).reshape(shape), np.log(draws).reshape(len(draws), *shape)
            for window, columns in windows:
                base = {
                    "teacher": group[0],
                    "temperature": group[1],
                    "rung": label,
                    "window": window,
                    "replicates": replicates,
                }
                missing = ~np.isfinite(point[:, columns]).all(axis=0)
                if missing.any():
                    lacking = ", ".join(f"ℓ={d}" for d in depths[columns][missing])
                    rows.append(
                        {**base, "note": f"{'not extrapolable' if label == INFINITY else 'not trained'} at {lacking}"}
                    )
                    continue
                alpha, low, high, method = exponent_interval(depths[columns], point[:, columns], draws[:, :, columns])
                row = {**base, "alpha": alpha, "alpha_low": low, "alpha_high": high, "method": method, "note": ""}
                if steps is not None:
                    row["p"], row["p_low"], row["p_high"], _ = exponent_interval(
                        steps[columns], point[:, columns], draws[:, :, columns]
                    )
                    if reference is not None:  # α of the ratio against 1/u is minus its slope
                        ratio = point[:, columns] - reference[:, columns]
                        negative, high_, low_, _ = exponent_interval(
                            steps[columns], ratio, draws[:, :, columns] - reference[:, columns]
                        )
                        row |= {
                            "discretisation_slope": -negative,
                            "discretisation_slope_low": -low_,
                            "discretisation_slope_high": -high_,
                        }
                rows.append(row)
    columns = [
        "teacher",
        "temperature",
        "rung",
        "window",
        "replicates",
        "alpha",
        "alpha_low",
        "alpha_high",
        "p",
        "p_low",
        "p_high",
        "discretisation_slope",
        "discretisation_slope_low",
        "discretisation_slope_high",
        "method",
        "note",
    ]
    return pd.DataFrame(rows).reindex(columns=columns)


MEASURES = [("alpha", "α"), ("p", "p in 1/ℓ − 1/ℓ*"), ("discretisation_slope", "slope of L/L_Euler against 1/u")]


def interval_text(row, name: str) -> str:
    value = getattr(row, name)
    return f"{value:.2f} [{getattr(row, name + '_low'):.2f}, {getattr(row, name + '_high'):.2f}]"


def ladder_lines(ladder: pd.DataFrame, exponents: pd.DataFrame) -> str:
    """The ladder as a user reads it: per group, each depth's rungs, its ratios and L∞, then α, p and
    the slope over the Euler rule at every rung."""
    rungs = ladder_rungs(ladder)
    triples = [rung for rung in rungs[2:] if ratio_column(rung) in ladder]
    lines = []
    for (teacher, temperature), students in ladder.groupby(GROUP, dropna=False, sort=True):
        name = teacher if pd.isna(temperature) else f"{teacher} T={temperature:g}"
        several = students.replicate.nunique() > 1  # then r per replicate without intervals
        lines.append(
            f"{name}: budget ladder ×{', ×'.join(map(str, rungs))} (geometric mean over "
            f"{students.replicate.nunique()} replicate(s); r_x<k>: the move into ×k over the one before"
            f"{', per replicate' if several else ', 95 %'}; L∞ only where the last two r agree, r drawn "
            f"between them)"
        )
        cells = []
        for depth, rows in students.groupby("depth", sort=True):
            losses = [f"{np.exp(np.log(rows[f'loss_{rung_label(rung)}']).mean()):.3e}" for rung in rungs]
            ratio_cells = [
                ", ".join(
                    (f"{getattr(row, ratio_column(rung)):.2f}" if several else interval_text(row, ratio_column(rung)))
                    if np.isfinite(getattr(row, ratio_column(rung)))
                    else "–"
                    for row in rows.itertuples()
                )
                for rung in triples
            ]
            limits = [
                f"{row.loss_inf:.2e} [{row.loss_inf_low:.2e}, {row.loss_inf_high:.2e}]"
                if np.isfinite(row.loss_inf)
                else f"{row.status} ({row.reason})"
                for row in rows.itertuples()
            ]
            limit = limits[0] if len(set(limits)) == 1 else "; ".join(limits)
            cells.append([str(depth), *losses, *ratio_cells, limit])
        header = ["ℓ", *(f"×{rung}" for rung in rungs), *(f"r_x{rung}" for rung in triples), "L∞ [95 %]"]
        widths = [max(len(row[k]) for row in [header, *cells]) for k in range(len(header) - 1)]
        lines += [
            "  " + "  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1]
            for row in [header, *cells]
        ]
        rows = exponents[
            (exponents.teacher == teacher)
            & (exponents.temperature.isna() if pd.isna(temperature) else exponents.temperature == temperature)
        ]
        depths = np.sort(students.depth.unique())
        for window in rows.window.unique():
            by_rung = rows[rows.window == window]
            low, high = (int(depth) for depth in window.split("–"))
            wide = ((depths >= low) & (depths <= high)).sum() > 2  # p and the slope: over windows, not pairs
            for measure, name in MEASURES if wide else MEASURES[:1]:
                if measure != "alpha" and by_rung[measure].isna().all():
                    continue
                cells = [
                    f"{row.rung} {interval_text(row, measure)}"
                    if np.isfinite(getattr(row, measure))
                    else f"{row.rung} – ({row.note})"
                    for row in by_rung.itertuples()
                ]
                lines.append(f"  {name} over ℓ {window}: " + "; ".join(cells))
    return "\n".join(lines)


def depth_ratios(
    ladder: pd.DataFrame, shallow: int, deep: int, teacher_depth: int, rng: np.random.Generator | None = None
) -> pd.DataFrame:
    """Per group, replicate and rung where both depths trained: L(shallow)/L(deep) with its 95 %
    interval (the two students' test noise, taken as independent: they share the test set, so this
    is wider than need be, never narrower), and the exponent p of the step mismatch it implies,
    L ∝ (1/ℓ − 1/ℓ*)^p: one number that separates the laws (science.md §12: L(12)/L(24) is 5.0 for
    p = 2, 8.7 for p = 2.7 and 11.1 for p = 3). Empty where the ladder lacks either depth."""
    rng = rng or np.random.default_rng(4)
    columns = [
        *GROUP,
        "replicate",
        "rung",
        "steps",
        "shallow",
        "deep",
        "ratio",
        "ratio_low",
        "ratio_high",
        "p",
        "p_low",
        "p_high",
    ]
    rows = []
    if deep >= teacher_depth:  # no step mismatch to read p in
        return pd.DataFrame(rows, columns=columns)
    mismatch = np.log(step_mismatch([shallow], teacher_depth)[0] / step_mismatch([deep], teacher_depth)[0])
    for keys, students in ladder[ladder.depth.isin([shallow, deep])].groupby([*GROUP, "replicate"], dropna=False):
        pair = students.set_index("depth")
        if len(pair) != 2:
            continue
        for rung in ladder_rungs(ladder):
            loss, noise = pair[f"loss_{rung_label(rung)}"], pair[f"noise_{rung_label(rung)}"]
            if not np.isfinite(loss).all():
                continue
            draws = loss_draws(loss.to_numpy()[None], noise.to_numpy()[None], rng)[:, 0]
            ratio, sampled = loss[shallow] / loss[deep], draws[:, 0] / draws[:, 1]
            low, high = np.quantile(sampled, [(1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2])
            rows.append(
                {
                    **dict(zip([*GROUP, "replicate"], keys)),
                    "rung": rung_label(rung),
                    "steps": pair[f"steps_{rung_label(rung)}"][deep],
                    "shallow": shallow,
                    "deep": deep,
                    "ratio": ratio,
                    "ratio_low": low,
                    "ratio_high": high,
                    "p": np.log(ratio) / mismatch,
                    "p_low": np.log(low) / mismatch,
                    "p_high": np.log(high) / mismatch,
                }
            )
    return pd.DataFrame(rows, columns=columns)


def ratio_lines(ratios: pd.DataFrame, teacher_depth: int) -> str:
    """`depth_ratios` as a user reads it: per replicate, the ratio and its p at every rung, and what
    converged students of p = 2, 2.7 and 3 would give."""
    lines = []
    for (teacher, replicate), rows in ratios.groupby(["teacher", "replicate"], sort=True):
        first = rows.iloc[0]
        cells = [
            f"{row.rung} {row.ratio:.2f} [{row.ratio_low:.2f}, {row.ratio_high:.2f}] (p {row.p:.2f})"
            for row in rows.itertuples()
        ]
        lines.append(f"{teacher} replicate {replicate}: L({first.shallow})/L({first.deep}) " + "; ".join(cells))
    if lines:
        u = step_mismatch([first.shallow, first.deep], teacher_depth)
        laws = ", ".join(f"{(u[0] / u[1]) ** p:.2f} for p = {p:g}" for p in (2, 2.7, 3))
        lines.append(f"  (converged students in the step mismatch 1/ℓ − 1/{teacher_depth}: {laws})")
    return "\n".join(lines)
