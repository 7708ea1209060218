"""A finished run's trained students, as the `trained` start takes them (models/starts.py).

The start knows nothing of run folders: this module reads them and registers itself as the way
a run's students are read (`starts.reads_trained_runs`), so that models/ stays below training/.
`training.protocol` imports it: whatever resolves a protocol, the engine alone included, can
train a trained start.
"""

from functools import lru_cache
from pathlib import Path

import pandas as pd
import torch

from ..columns import STUDENT
from ..config import SweepConfig, read_config_file
from ..errors import ToymodelsError
from ..models.losses import loss_named
from ..models.starts import (
    ANY_TEMPERATURE,
    SAME_TEACHERS,
    reads_trained_runs,
    temperature_key,
)
from ..models.students import StudentSpec, population_layout, student_architecture
from ..models.weights import LayerWeights


@reads_trained_runs
@lru_cache(maxsize=4)
def trained_students(run: str, config: SweepConfig) -> dict[tuple, tuple[LayerWeights, torch.Tensor | None]]:
    """The layers of each (teacher, replicate, temperature, depth) student of the finished run
    folder `run`, which must have kept its students and share the sweep's teachers and
    architecture: of its starts, the one whose last test loss is lowest; under the temperature
    ANY_TEMPERATURE, the lowest of its starts and temperatures. With them, its trained head when
    the run trained one with this sweep's loss (a polish continues it), else None."""
    folder = Path(run)
    source = SweepConfig().replace(**read_config_file(folder / "config.json"))
    different = [key for key in SAME_TEACHERS if getattr(source, key) != getattr(config, key)]
    if different:
        raise ToymodelsError(
            f"{run} differs from this sweep in {', '.join(different)}: its students learnt other "
            f"teachers or are another architecture"
        )
    try:
        saved = torch.load(folder / "students.pt", map_location="cpu")
        metrics = pd.read_csv(folder / "metrics.csv")
    except (OSError, RuntimeError, pd.errors.ParserError) as error:
        raise ToymodelsError(
            f"{run} is not a finished run that kept its students ({type(error).__name__}): "
            f"run it to the end with --save-students"
        ) from None
    specs = [StudentSpec(**spec) for spec in saved["specs"]]
    temperatures = loss_named(source.loss).temperatures(source)
    last = metrics[metrics.step == metrics.groupby(STUDENT, dropna=False).step.transform("max")]
    final = {student_key(*row[:-1]): row[-1] for row in last[[*STUDENT, "test_loss"]].itertuples(index=False)}

    def loss(spec):
        teacher, replicate = source.teacher_instances[spec.instance]
        return final[student_key(teacher, temperatures[spec.temperature_index], replicate, spec.depth, spec.start)]

    stages = student_architecture(source.student).stages
    _, row_keys = population_layout(specs, stages)
    row_of = {key: row for row, key in enumerate(row_keys)}
    heads = saved["state_dict"].get("head") if source.loss == config.loss else None
    best = {}
    for spec in sorted(specs, key=loss, reverse=True):  # the lowest loss of each student comes last and stays
        rows = [row_of[(spec, k)] for k in range(spec.depth * stages)]
        layers = LayerWeights(*(saved["state_dict"][name][rows] for name in ("w_in", "b_in", "w_out")))
        head = None if heads is None else heads[specs.index(spec)]
        temperature = temperature_key(temperatures[spec.temperature_index])
        for key in (temperature, ANY_TEMPERATURE):
            best[(*source.teacher_instances[spec.instance], key, spec.depth)] = layers, head
    return best


def student_key(teacher, temperature, replicate, depth, start) -> tuple:
    """One student of a run (`columns.STUDENT`), as a key that compares equal (no temperature:
    None, not NaN, which equals nothing)."""
    return teacher, temperature_key(temperature), int(replicate), int(depth), start
