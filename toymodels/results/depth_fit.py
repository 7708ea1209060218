"""`DepthFit`: the exponent of one (teacher, temperature) group and everything needed to judge
it, and its JSON form (fit.json), which older runs wrote with other names and without some fields.
"""

from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass
class DepthFit:
    """The exponent of one (teacher, temperature) group and everything needed to judge it.
    Fields with defaults are absent from older fit.json files."""

    teacher: str
    temperature: float
    alpha: float  # mean of replicate_alphas
    alpha_low: float
    alpha_high: float
    interval: str  # how alpha_low and alpha_high were found
    replicates: int
    steps: int
    depths: list[int]
    losses: list[float]  # geometric mean over replicates, per depth
    local_slopes: list[float]
    floor_fit: dict | None
    certified: bool  # every fitted student certified (certification.certify): else α is a lower bound
    uncertified_depths: list[int]
    alpha_over_training: list[tuple]  # (step, α, low, high); older fit.json files: (step, α)
    diverged: list[dict] = field(default_factory=list)  # {replicate, depth, step}: left out of the fit
    excluded_depths: list[int] = field(default_factory=list)  # depths some replicate lacks (diverged, missing) or
    # where the untrained discretisation is the teacher itself (as deep as it: loss 0, no power law)
    replicate_alphas: list[float] = field(default_factory=list)  # one log–log slope per teacher replicate
    window_alpha_min: float | None = None  # α over contiguous windows of ≥ 3 depths (None: fewer depths)
    window_alpha_max: float | None = None
    regime: str = "undetermined (fit predates the regime verdict)"
    # The certificate (fits older than it have none): per depth, which start gave the fitted loss
    # ("zero", or "zero 2/3" when replicates differ) and the reference's geometric mean.
    best_starts: list[str] = field(default_factory=list)
    reference_losses: list[float | None] = field(default_factory=list)
    reference_alpha: float | None = None  # the untrained discretisation's exponent over the same depths
    max_gap: float | None = None  # the largest optimisation gap of a fitted student
    test_over_train: list[float | None] = field(default_factory=list)  # per depth, the fitted students' largest
    students: list[dict] = field(default_factory=list)  # every student: replicate, depth, start, losses, gap, …
    # α in the step mismatch u = 1/ℓ − 1/ℓ*: L ∝ u^α, which a finite teacher's map makes exact for
    # a pure discretisation error (the log–log α rises toward ℓ* instead)
    mismatch_alpha: float | None = None
    mismatch_alpha_low: float | None = None
    mismatch_alpha_high: float | None = None
    teacher_depth: int | None = None
    # α against step of each start's students alone, when a run has several: the zero start's is the
    # paper's curve, whose trap the certified α shows (the best start's is `alpha_over_training`)
    start_alphas_over_training: dict[str, list[tuple]] = field(default_factory=dict)
    # starts that raced and fell behind their student's leader (training/racing.py): {replicate,
    # depth, start, step, behind_by}, behind_by their gap then; never a fitted student
    stopped: list[dict] = field(default_factory=list)

    @property
    def group(self) -> tuple[str, float | None]:
        """(teacher, temperature) as a key that compares equal: NaN (no temperature) never equals itself."""
        return self.teacher, None if np.isnan(self.temperature) else self.temperature

    @classmethod
    def from_dict(cls, data: dict) -> "DepthFit":
        """The fit `as_dict` wrote: its nulls that stand for a number not there (no temperature, no
        interval over one teacher) read as NaN again, as the fit made them."""
        data = {RENAMED.get(key, key): value for key, value in data.items()}  # a fit.json written before
        data = {**data, **{name: _nan_for_null(data.get(name)) for name in NUMBERS_OR_NAN}}
        if data.get("mismatch_alpha") is not None:  # fitted, perhaps without an interval
            data |= {name: _nan_for_null(data[name]) for name in ("mismatch_alpha_low", "mismatch_alpha_high")}
        data["alpha_over_training"] = [list(map(_nan_for_null, row)) for row in data["alpha_over_training"]]
        data["start_alphas_over_training"] = {
            start: [list(map(_nan_for_null, row)) for row in rows]
            for start, rows in data.get("start_alphas_over_training", {}).items()
        }
        return cls(**data)

    def as_dict(self) -> dict:
        """JSON-ready for a strict reader: every NaN or infinity written as null (a loss without
        temperature, MSE, has `temperature: null`; one teacher gives no interval)."""
        return _null_for_nan(asdict(self))


NUMBERS_OR_NAN = ("temperature", "alpha", "alpha_low", "alpha_high")  # DepthFit's floats that may be NaN


RENAMED = {"converged": "certified", "not_converged_depths": "uncertified_depths"}  # one word, as the CLI and pages say


def _null_for_nan(value):
    """`value` with every non-finite float, however nested, as None: JSON has no NaN."""
    if isinstance(value, dict):
        return {key: _null_for_nan(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_null_for_nan(item) for item in value]
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def _nan_for_null(value):
    return np.nan if value is None else value
