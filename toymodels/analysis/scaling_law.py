"""The LLM side: the decomposed scaling law fitted to the Chinchilla model shapes.

L(m, ℓ, D) = c_m/m^α_m + c_ℓ/ℓ^α_ℓ + c_D/D^α_D + L₀, with m = d_model, ℓ = 100·n_layers and D in millions of
tokens, fitted in log space (mean squared residual of log L) after dropping the highest-loss runs.
"""

from dataclasses import dataclass
from importlib import resources

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ..errors import ToymodelsError

VARIABLES = ("m", "l", "D")
REPORTED = ("alpha_m", "alpha_l", "alpha_D", "L0")
# Liu et al. (2026), fitted on the same data: value and ± (None where the paper gives no error).
PAPER = {
    "alpha_m": (0.98, 0.08),
    "alpha_l": (1.2, 0.3),
    "alpha_D": (0.30, 0.01),
    "L0": (1.75, None),
    "mean_relative_error": (0.004, None),
}
N_PARAMETERS = 7
TOLERANCE = 1e-14  # converge fully: the loss is shallow along α_ℓ (SE ≈ 0.3), so a loose stop lands anywhere


@dataclass(frozen=True)
class ScalingLawFit:
    """The fitted law (coefficients in the units of m, l, D) and how well it describes its rows."""

    alpha_m: float
    alpha_l: float
    alpha_D: float
    c_m: float
    c_l: float
    c_D: float
    L0: float
    stderr: dict  # of REPORTED, from the Jacobian of the log residuals at the optimum
    mean_relative_error: float
    rmse_log: float
    n_rows: int

    @property
    def alphas(self) -> np.ndarray:
        return np.array([self.alpha_m, self.alpha_l, self.alpha_D])

    @property
    def coefficients(self) -> np.ndarray:
        return np.array([self.c_m, self.c_l, self.c_D])

    def terms(self, df: pd.DataFrame) -> np.ndarray:
        """The width, depth and data terms c/x^α, one column each."""
        return self.coefficients * df[list(VARIABLES)].to_numpy() ** -self.alphas

    def predict(self, df: pd.DataFrame) -> np.ndarray:
        return self.terms(df).sum(axis=1) + self.L0


def load_chinchilla(drop_top: int = 40, depth_offset: int = 0) -> pd.DataFrame:
    """The reconstructed Chinchilla runs without the highest-loss ones, with the fit's variables m, l, D added.

    Ties are dropped together: every row whose loss reaches the `drop_top`-th highest loss goes (K=40 leaves 203).
    Depth counts n_layers − `depth_offset` layers.
    """
    with resources.files("toymodels").joinpath("data/chinchilla_isoflop_shapes.csv").open() as file:
        runs = pd.read_csv(file)
    if not 0 <= drop_top < len(runs):
        raise ToymodelsError(f"--drop-top must be between 0 and {len(runs) - 1}, got {drop_top}")
    if depth_offset >= runs.n_layers.min():
        raise ToymodelsError(
            f"--depth-offset must be below the smallest depth ({runs.n_layers.min():.0f} layers), got {depth_offset}"
        )
    if drop_top:
        threshold = np.sort(runs.loss.to_numpy())[::-1][drop_top - 1]
        runs = runs[runs.loss < threshold]
    return runs.assign(m=runs.d_model, l=100.0 * (runs.n_layers - depth_offset), D=runs.num_tokens / 1e6)


def fit_scaling_law(df: pd.DataFrame, start: ScalingLawFit | None = None) -> ScalingLawFit:
    """Least squares on log L, from `start` or else from a grid of starting points, keeping the best optimum.

    Each term is parametrised as exp(b − α·(log x − centre)) with the centre at the data's mean log x, so that b and
    α are nearly uncorrelated; L₀ is kept ≥ 0.
    """
    if len(df) <= N_PARAMETERS:
        raise ToymodelsError(f"{len(df)} rows are too few to fit {N_PARAMETERS} parameters")
    log_x = np.log(df[list(VARIABLES)].to_numpy())
    centre = log_x.mean(axis=0)
    log_loss = np.log(df.loss.to_numpy())

    def residuals(theta):
        terms = np.exp(theta[:3] - (log_x - centre) * theta[3:6])
        return np.log(terms.sum(axis=1) + theta[6]) - log_loss

    starts = [_theta_from_fit(start, centre)] if start else _starting_grid(df.loss.to_numpy())
    lower = np.r_[np.full(6, -np.inf), 0.0]
    best = min(
        (
            least_squares(
                residuals,
                theta,
                bounds=(lower, np.inf),
                x_scale="jac",
                xtol=TOLERANCE,
                ftol=TOLERANCE,
                gtol=TOLERANCE,
                max_nfev=5000,
            )
            for theta in starts
        ),
        key=lambda result: result.cost,
    )
    return _fit_from_optimum(best, centre)


def _starting_grid(loss: np.ndarray) -> list[np.ndarray]:
    """Equal exponents 0.5, 1 or 2 and a floor at 30 % or 80 % of the smallest loss; terms share the rest equally."""
    grid = []
    for alpha in (0.5, 1.0, 2.0):
        for floor in (0.3 * loss.min(), 0.8 * loss.min()):
            b = np.log((np.median(loss) - floor) / 3)
            grid.append(np.r_[np.full(3, b), np.full(3, alpha), floor])
    return grid


def _theta_from_fit(fit: ScalingLawFit, centre: np.ndarray) -> np.ndarray:
    return np.r_[np.log(fit.coefficients) - fit.alphas * centre, fit.alphas, fit.L0]


def _fit_from_optimum(result, centre: np.ndarray) -> ScalingLawFit:
    alphas, L0 = result.x[3:6], result.x[6]
    coefficients = np.exp(result.x[:3] + alphas * centre)
    n_rows = len(result.fun)
    variance = 2 * result.cost / (n_rows - N_PARAMETERS)  # cost is half the sum of squared residuals
    stderr = np.sqrt(np.diag(np.linalg.pinv(result.jac.T @ result.jac)) * variance)
    return ScalingLawFit(
        *map(float, alphas),
        *map(float, coefficients),
        float(L0),
        stderr=dict(zip(REPORTED, map(float, stderr[3:]))),
        mean_relative_error=float(np.mean(np.abs(np.expm1(result.fun)))),
        rmse_log=float(np.sqrt(np.mean(result.fun**2))),
        n_rows=n_rows,
    )


def bootstrap_scaling_law(df: pd.DataFrame, fit: ScalingLawFit, n: int = 200, seed: int = 0) -> dict:
    """Percentile 95 % intervals of the exponents and L₀ over `n` refits on rows resampled with replacement.

    Each refit starts from the full-data optimum `fit`: that only saves time, since every start reaches one optimum.
    """
    if n < 2:
        raise ToymodelsError(f"--bootstrap needs at least 2 resamples (or 0 to skip it), got {n}")
    rng = np.random.default_rng(seed)
    refits = [fit_scaling_law(df.iloc[rng.integers(0, len(df), len(df))], start=fit) for _ in range(n)]
    samples = pd.DataFrame([{name: getattr(refit, name) for name in REPORTED} for refit in refits])
    return {name: tuple(map(float, np.percentile(samples[name], [2.5, 97.5]))) for name in REPORTED}


def holdout_check(df: pd.DataFrame, fit: ScalingLawFit, splits: int = 20, seed: int = 0) -> dict:
    """Mean relative error on the 80 % a fit saw and on the 20 % it did not, averaged over random splits."""
    rng = np.random.default_rng(seed)
    train_errors, test_errors = [], []
    for _ in range(splits):
        in_train = rng.permutation(len(df)) < round(0.8 * len(df))
        train, test = df[in_train], df[~in_train]
        refit = fit_scaling_law(train, start=fit)
        train_errors.append(refit.mean_relative_error)
        test_errors.append(float(np.mean(np.abs(refit.predict(test) / test.loss.to_numpy() - 1))))
    return {
        "splits": splits,
        "train_mean_relative_error": float(np.mean(train_errors)),
        "test_mean_relative_error": float(np.mean(test_errors)),
    }


def scan_drop_top(ks=(0, 20, 40, 60, 80), depth_offset: int = 0) -> pd.DataFrame:
    """How the fit moves with the number K of highest-loss runs dropped."""
    rows = []
    for k in ks:
        fit = fit_scaling_law(load_chinchilla(k, depth_offset))
        rows.append(
            {
                "K": k,
                "rows": fit.n_rows,
                **{name: getattr(fit, name) for name in REPORTED},
                "se_alpha_l": fit.stderr["alpha_l"],
                "mean_relative_error": fit.mean_relative_error,
            }
        )
    return pd.DataFrame(rows)


def depth_part(df: pd.DataFrame, fit: ScalingLawFit) -> np.ndarray:
    """The loss left to depth: L minus the fitted width, data and floor terms."""
    width, _, data = fit.terms(df).T
    return df.loss.to_numpy() - width - data - fit.L0
