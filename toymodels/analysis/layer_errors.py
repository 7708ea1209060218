"""How a student's layer errors add up to its output error (the paper's mechanism for α ≈ 3).

A depth-ℓ student runs s_0 = rmsnorm(x), s_{k+1} = s_k + g_k(s_k); its teacher runs ℓ* layers.
Give student layer k a *slot* of the teacher's layers, τ_k … τ_{k+1} − 1 (τ_0 = 0, τ_ℓ = ℓ*), and
let Ψ_k(h) apply the teacher's layers τ_k … ℓ* − 1 to h. Then

    E_k = Ψ_{k+1}(s_{k+1}) − Ψ_k(s_k)

is layer k's local error (what it did, against what the teacher's slot would have done from the
same state), carried to the end by the teacher itself, and the E_k telescope: Σ_k E_k = s_ℓ − t_ℓ*,
the pre-norm output error, exactly. Nothing here assumes the teacher is a flow: a slot is a run of
the teacher's own layers, so independent, tied and correlated teachers split alike.

How the E_k add decides the exponent: aligned (coherent) errors of an order-p rule give
MSE ∝ ℓ^−2p, independent ones (the paper's typical case) ℓ^−(2p+1), and errors that cancel
(C ≪ 1) neither. The loss sees only rmsnorm(s_ℓ): `LayerErrorSplit.seen_by_readout` splits
rmsnorm(s_ℓ) − rmsnorm(t_ℓ*) the same way, E'_k = rmsnorm(Ψ_{k+1}(s_{k+1})) − rmsnorm(Ψ_k(s_k)),
which drops the radial part a student's states may carry at no cost and telescopes exactly to
the error the MSE loss measures. `LayerErrorSplit` holds one student's split and measures it;
`split_errors` computes it for states on any teacher; `even_boundaries` and `following_boundaries`
give the two slot choices: even, or where the student's states are closest to the teacher's.
"""

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from ..errors import ToymodelsError
from ..models.blocks import layer_field, rmsnorm
from ..models.integrators import state_parts
from ..models.starts import TRAINED_START
from ..models.teachers import Flow
from ..models.weights import LayerWeights
from ..results.storage import RunFolder
from ..training.population import Population
from .diagnostics import load_students


def even_boundaries(depth: int, teacher_depth: int) -> torch.Tensor:
    """τ_k = k·ℓ*/ℓ, rounded to the nearest teacher step where ℓ does not divide ℓ*."""
    return torch.tensor([round(k * teacher_depth / depth) for k in range(depth + 1)])


def squared_distances(student_states: torch.Tensor, teacher_states: torch.Tensor) -> torch.Tensor:
    """D[k, j] = E‖s_k − t_j‖² over the samples: (ℓ + 1, ℓ* + 1)."""
    return torch.stack([(teacher_states - s).square().sum(-1).mean(-1) for s in student_states])


def following_boundaries(student_states: torch.Tensor, teacher_states: torch.Tensor) -> torch.Tensor:
    """The slots that follow the student: τ_k = the teacher step whose state is closest to s_k
    (mean squared distance), under τ non-decreasing, τ_0 = 0 and τ_ℓ = ℓ* (the least total
    distance, by dynamic programming over the steps)."""
    distances = squared_distances(student_states, teacher_states).double()
    depth, teacher_depth = len(student_states) - 1, len(teacher_states) - 1
    inf = torch.tensor(math.inf, dtype=distances.dtype)
    cost = torch.full((teacher_depth + 1,), math.inf, dtype=distances.dtype)
    cost[0] = distances[0, 0]
    choices = []
    for k in range(1, depth + 1):
        best, where = torch.cummax(-cost, 0)  # the cheapest path to any step ≤ j
        choices.append(where)
        cost = distances[k] - best
        if k == depth:  # the last state ends at the teacher's end
            cost = torch.where(torch.arange(teacher_depth + 1) == teacher_depth, cost, inf)
    boundaries = [teacher_depth]
    for where in reversed(choices):
        boundaries.append(int(where[boundaries[-1]]))
    return torch.tensor(boundaries[::-1])


def carried_to_end(flow: Flow, states: torch.Tensor, boundaries: torch.Tensor) -> torch.Tensor:
    """Ψ_k(s_k) for every k: each state (ℓ + 1, samples, width) run through the teacher's layers
    from its boundary τ_k to the end (`flow`: one teacher's, (ℓ*, ...) each). A teacher whose state
    is more than h cannot take a student's h mid-way: refused."""
    if state_parts(flow.integrator, states[:1]) != 1:
        raise ToymodelsError(
            f"the layer-error split carries a student's h through its teacher's layers, and this "
            f"teacher's integrator ({type(flow.integrator).__name__}) carries more than h"
        )
    carried, layers = states.clone(), flow.layers
    for step, weights in enumerate(zip(layers.w_in, layers.b_in, layers.w_out)):
        running = (boundaries <= step).nonzero().squeeze(1)
        h = carried[running].reshape(1, -1, carried.shape[-1])  # one teacher layer on every running state at once
        (stepped,) = flow.integrator.step((h,), step, layer_field(*(w[None, None] for w in weights)))
        carried[running] = stepped.view(len(running), *carried.shape[1:])
    return carried


@dataclass(frozen=True)
class LayerErrorSplit:
    """One student's output error split by layer. `carried` (ℓ + 1, samples, width): Ψ_k(s_k),
    each of the student's states carried to the end by the teacher, whose differences are the
    E_k (kept rather than the E_k so that a split can be read through the read-out exactly);
    `boundaries` (ℓ + 1): τ_k; `boundary_distances` (ℓ + 1): E‖s_k − t_{τ_k}‖², how far the
    student's path runs from the teacher's at each slot boundary."""

    carried: torch.Tensor
    boundaries: torch.Tensor
    boundary_distances: torch.Tensor

    @property
    def errors(self) -> torch.Tensor:
        """E_k = Ψ_{k+1}(s_{k+1}) − Ψ_k(s_k): (ℓ, samples, width)."""
        return self.carried[1:] - self.carried[:-1]

    @property
    def depth(self) -> int:
        return len(self.errors)

    @property
    def output_error(self) -> torch.Tensor:
        return self.errors.sum(0)

    def layer_sizes(self) -> np.ndarray:
        """E‖E_k‖² per layer."""
        return self.errors.double().square().sum(-1).mean(-1).numpy()

    def coherence(self) -> float:
        """C = E‖Σ E_k‖² / Σ_k E‖E_k‖²: about ℓ when the errors are aligned, 1 when they add like
        independent terms, ≪ 1 when they cancel."""
        return float(self.output_error.double().square().sum(-1).mean() / self.layer_sizes().sum())

    def aligned_bound(self) -> float:
        """The C of errors of the same sizes all pointing one way: (Σ_k √E‖E_k‖²)² / Σ_k E‖E_k‖²."""
        sizes = self.layer_sizes()
        return float(np.sqrt(sizes).sum() ** 2 / sizes.sum())

    def lag_cosines(self) -> np.ndarray:
        """Mean cosine of E_k and E_{k+j} (over samples and k) for lags j = 1 … ℓ − 1."""
        errors = self.errors.double()
        unit = errors / errors.norm(dim=-1, keepdim=True)  # NaN for a layer that makes no error: left out
        return np.array([float((unit[:-lag] * unit[lag:]).sum(-1).nanmean()) for lag in range(1, self.depth)])

    def seen_by_readout(self) -> "LayerErrorSplit":
        """The split as the loss sees it: E'_k = rmsnorm(Ψ_{k+1}(s_{k+1})) − rmsnorm(Ψ_k(s_k)).
        rmsnorm ignores the radial part of an error, which a student's pre-norm states may carry
        at no cost; these E'_k telescope exactly to rmsnorm(s_ℓ) − rmsnorm(t), whose mean square
        per coordinate is the MSE loss, at any error size. (Tables split before this was exact
        say `readout_linearised`: each E_k through the read-out's Jacobian at t, which sums to
        the loss's error only to first order, and overstated the independent teachers' doubled
        students' output error 1.1–1.8×.)"""
        return LayerErrorSplit(rmsnorm(self.carried), self.boundaries, self.boundary_distances)

    def summary(self) -> dict:
        coherence, bound = self.coherence(), self.aligned_bound()
        cosines = self.lag_cosines()
        return {
            "coherence": coherence,
            "aligned_bound": bound,
            "alignment": coherence / bound,
            "local_to_output": 1 / coherence,
            "neighbour_cosine": cosines[0] if len(cosines) else math.nan,
            "output_error": float(self.output_error.double().square().sum(-1).mean()),
            "local_error_sum": float(self.layer_sizes().sum()),
            # False where ℓ does not divide ℓ* and even slots round: slots of unequal length
            # make an Euler-like student's errors alternate with the rounding
            "equal_slots": len(set(torch.diff(self.boundaries).tolist())) == 1,
        }


def split_errors(
    flow: Flow, student_states: torch.Tensor, teacher_states: torch.Tensor, boundaries: torch.Tensor
) -> LayerErrorSplit:
    """The split of a student's output error (its states s_0 … s_ℓ, (ℓ + 1, samples, width)) on
    the teacher `flow`, whose own states on the same inputs are `teacher_states`, with slot
    boundaries τ (ℓ + 1 teacher steps, 0 first, ℓ* last)."""
    offsets = student_states - teacher_states[boundaries]
    return LayerErrorSplit(
        carried_to_end(flow, student_states, boundaries), boundaries, offsets.double().square().sum(-1).mean(-1)
    )


SPLITS = {
    "even": lambda students, teachers: even_boundaries(len(students) - 1, len(teachers) - 1),
    "following": following_boundaries,
}  # how a student's slots are chosen


def split_tables(split: LayerErrorSplit, keys: dict) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """One student's split as tidy rows under `keys`: its summary, its layers (slot, the share of
    Σ E‖E_k‖² the layer makes, the boundary distance at its start) and its lag cosines."""
    sizes = split.layer_sizes()
    boundaries = split.boundaries.numpy()
    layers = pd.DataFrame(
        {
            **keys,
            "layer": np.arange(split.depth),
            "slot_start": boundaries[:-1],
            "slot_steps": np.diff(boundaries),
            "error_share": sizes / sizes.sum(),
            "boundary_distance": split.boundary_distances[:-1].numpy(),
        }
    )
    lags = pd.DataFrame({**keys, "lag": np.arange(1, split.depth), "cosine": split.lag_cosines()})
    return {**keys, **split.summary()}, layers, lags


def population_splits(population, inputs: torch.Tensor, labels: dict) -> tuple[list, list, list]:
    """Every student of `population` (analysis.diagnostics) split both ways on `inputs`
    (instances, samples, width): summary rows, layer rows and lag rows, each under its
    student's keys, its test loss and `labels`."""
    teachers = population.teachers
    teacher_states = torch.stack(teachers.hidden_states(inputs))  # (ℓ* + 1, instances, samples, width)
    student_states = population.students.hidden_states(rmsnorm(inputs)[population.student_instances])
    test_losses = population.test_losses().tolist()
    temperatures = population.protocol.temperatures
    summaries, layers, lags = [], [], []
    for m, (spec, states) in enumerate(zip(population.specs, student_states)):
        row = int(population.student_instances[m])
        teacher, replicate = teachers.instances[row]
        keys = {
            "teacher": teacher,
            "replicate": replicate,
            "temperature": temperatures[spec.temperature_index],
            "depth": spec.depth,
            "start": spec.start,
            **labels,
            "test_loss": test_losses[m],
        }
        teacher = Flow(
            LayerWeights(teachers.w_in[:, row], teachers.b_in[:, row], teachers.w_out[:, row]),
            teachers.integrators[row],
        )
        for slots, boundaries in SPLITS.items():
            split = split_errors(teacher, states, teacher_states[:, row], boundaries(states, teacher_states[:, row]))
            for space, seen in (("state", split), ("readout", split.seen_by_readout())):
                summary, layer_rows, lag_rows = split_tables(seen, {**keys, "slots": slots, "space": space})
                summaries.append(summary), layers.append(layer_rows), lags.append(lag_rows)
    return summaries, layers, lags


SPLIT_TABLES = ("coherence", "error_layers", "error_lags")  # what split_run gives


def split_run(folder: RunFolder, samples: int = 1024, start: str | None = None) -> dict[str, pd.DataFrame]:
    """Every saved student of a run split both ways, trained and (but for students trained on from
    another run's) untrained at its start: tidy tables `coherence` (one row per student, slot
    choice and training), `error_layers` and `error_lags`. `start` relabels the students' start
    (a polish's trained start is its run's `polished`)."""
    with torch.no_grad():
        trained = load_students(folder)
        inputs = trained.test_inputs[:, :samples]
        parts = [population_splits(trained, inputs, {"training": "trained"})]
        own_starts = [spec for spec in trained.specs if spec.start != TRAINED_START]
        if own_starts:
            untrained = Population(trained.protocol, torch.device("cpu"), specs=own_starts, reuse=trained)
            parts.append(population_splits(untrained, inputs, {"training": "untrained"}))
    summaries, layers, lags = (sum(column, []) for column in zip(*parts))
    tables = {
        "coherence": pd.DataFrame(summaries),
        "error_layers": pd.concat(layers, ignore_index=True),
        "error_lags": pd.concat(lags, ignore_index=True),
    }
    if start is not None:
        tables = {name: table.assign(start=start) for name, table in tables.items()}
    return tables


STUDENT_GROUP = ["teacher", "depth", "start", "training"]  # what a coherence table compares: over replicates and T
COHERENCE_MEASURES = ["test_loss", "coherence", "aligned_bound", "alignment", "neighbour_cosine"]
# positive scales, read on log axes and through log–log slopes: their replicates' mean is geometric,
# so that the means keep the relations between them (output error = C × Σ E‖E_k‖², alignment = C / bound)
SCALE_MEASURES = {
    "test_loss",
    "coherence",
    "aligned_bound",
    "alignment",
    "local_to_output",
    "output_error",
    "local_error_sum",
}


def replicate_means(table: pd.DataFrame, by: list[str], measures: list[str]) -> pd.DataFrame:
    """Each of `measures` averaged per group of `by`: geometric for the positive scales
    (SCALE_MEASURES), arithmetic for the rest (cosines, which change sign)."""
    scales = [measure for measure in measures if measure in SCALE_MEASURES]
    logged = table.assign(**{measure: np.log(table[measure]) for measure in scales})
    means = logged.groupby(by, sort=True)[measures].mean()
    return means.assign(**{measure: np.exp(means[measure]) for measure in scales})


def coherence_table(coherence: pd.DataFrame) -> pd.DataFrame:
    """How the split changes with ℓ, training and the start: per (teacher, depth, start,
    training, space: the pre-norm states or the read-out) the replicates' mean of each measure
    (`replicate_means`), even slots beside following ones."""
    means = replicate_means(coherence, STUDENT_GROUP + ["space", "slots"], COHERENCE_MEASURES)
    table = means.unstack("slots")
    table.columns = [f"{measure}_{slots}" for measure, slots in table.columns]
    table = table.drop(columns="test_loss_following").rename(columns={"test_loss_even": "test_loss"})
    return table.reset_index()


def error_exponents(coherence: pd.DataFrame) -> pd.DataFrame:
    """Where a depth exponent comes from. The output error is E‖Σ E_k‖² = C · Σ E‖E_k‖², so its
    log–log slope against ℓ is the local errors' slope plus the coherence's: per (teacher, start,
    training, space, slots), over the depths measured, the exponents α = −d log/d log ℓ of the
    output error, of Σ E‖E_k‖² and of C, each fitted to its replicates' geometric means, which keep
    the product (arithmetic ones do not), so alpha_output_error = alpha_local_error_sum +
    alpha_coherence exactly: a C that falls with ℓ adds to the output error's exponent. Independent
    addition of order-p local errors gives 2p + 1 from the sum and 0 from C; aligned addition the
    same sum and −1 from C (C ∝ ℓ)."""
    rows, kind = [], ["teacher", "start", "training", "space", "slots"]
    measures = ["output_error", "local_error_sum", "coherence"]
    for keys, group in coherence.groupby(kind, sort=True):
        means = replicate_means(group, ["depth"], measures)
        if len(means) < 2:
            continue
        log_depth = np.log(means.index.to_numpy(float))
        slopes = {f"alpha_{name}": -np.polyfit(log_depth, np.log(means[name].to_numpy()), 1)[0] for name in measures}
        rows.append({**dict(zip(kind, keys)), "depths": f"{means.index.min()}–{means.index.max()}", **slopes})
    return pd.DataFrame(rows)
