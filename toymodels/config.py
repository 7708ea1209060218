"""A sweep's whole protocol in one frozen object, the presets, and the checks of its values.

Every knob of the paper's protocol is a field; `PRESETS["paper"]` holds the paper's values
(Fig. 3b), `quick` and `cpu` reduced versions that run on a laptop. A config is resolved once
(preset → file → command-line overrides), checked, and written next to the results.

This module is a leaf: it names components (teacher, student, loss, schedule, start) but does not look
them up; `training.protocol.Protocol.of` resolves them, once, before anything is written or trained.
"""

import dataclasses
import json
import math
import tomllib
import types
import typing
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .errors import ToymodelsError


PRECISIONS = ("fp32", "tf32", "bf16")
PLATEAU_TESTS = ("relative", "trend")  # training/trainer.py's rules, by the name a config gives
MAX_COUNT = 10**12  # of steps, samples, …: far beyond any sweep, and inside a step counter's int64


def paper_temperatures(count: int = 16) -> tuple[float, ...]:
    return tuple(round(float(t), 6) for t in np.logspace(-2, 0, count))


@dataclass(frozen=True)
class SweepConfig:
    teachers: tuple[str, ...] = ("independent",)
    student: str = "euler"  # architecture: see students.STUDENTS
    loss: str = "kl"  # see losses.LOSSES: kl | kl-fixed-head | mse
    temperatures: tuple[float, ...] = paper_temperatures()  # of the target; a loss without them ignores them
    depths: tuple[int, ...] = (6, 12, 16, 24, 32, 48)  # blocks, for rk2
    teacher_depth: int = 128
    width: int = 32
    vocab: int = 128
    replicates: int = 3  # random teachers per setting
    first_replicate: int = 0  # the first one's index: a grid split by replicate runs the others apart, same teachers
    steps: int = 40_000
    batch: int = 1024
    lr: float = 6e-4  # base rate; a student of depth ℓ uses lr · ℓ^(−lr_depth_exponent)
    lr_depth_exponent: float = 0.0
    depth_lr: tuple[tuple[int, float], ...] = ()  # (depth, rate) pairs that replace lr·ℓ^(−exponent) there
    schedule: str = "constant"  # see optim.SCHEDULES: constant | S | G
    precision: str = "fp32"  # of the matmuls: fp32 | tf32 | bf16 (faster on recent GPUs, rounds the inputs)
    test_batches: int = 10
    test_batch_size: int = 1024
    evals: int = 30  # evaluation points, spaced geometrically in steps
    head_lr_depth_scaled: bool = False  # a trained head's rate: lr (the paper's), or lr·ℓ^(−exponent) like the blocks
    # Training to convergence (`converge`): `steps` is then a budget. Every `check_every` steps each
    # student's mean training loss is compared with its best; `patience` checks without a relative
    # improvement above `plateau_tolerance` make a plateau, answered by multiplying its rate by
    # `lr_decay`, `decays` times; the plateau after the last decay means converged, and the student
    # leaves the population. A student still improving at the budget is capped, not converged.
    converge: bool = False
    check_every: int = 250
    patience: int = 4
    plateau_tolerance: float = 0.01
    # relative: a window that beats the best by the tolerance resets the patience (noise hastens the
    # verdict); trend: the improvement over `patience` windows, from the trend of the last patience + 1,
    # under the tolerance with 95 % confidence (noise delays it). See training/trainer.py.
    plateau_test: str = "relative"
    lr_decay: float = 0.25
    decays: int = 3
    teacher_pool: int = 0  # 0: fresh teacher samples every step (the paper's); N: batches drawn from N samples
    pool_refresh: int = 0  # with a pool: steps between relabelling it with fresh inputs (0: never)
    starts: tuple[str, ...] = ("zero",)  # see starts.STARTS: each student trains from every one of them
    # Racing starts (training/racing.py; with `converge` and several starts): once a student's leading
    # start has converged, another start more than `race_margin` above it at two evaluations in a row,
    # from step `race_from_step` on, and not reaching it by the budget at its recent rate, stops.
    race: bool = True
    race_margin: float = 0.5
    race_from_step: int = 3000
    start_from: str | None = None  # the run folder whose trained students the `trained` start takes
    # A first stage (run_stages.py): the layers of every student trained on this loss first (e.g. mse: the
    # teacher's read-out states, which low-temperature targets stall short of), from `pretrain_starts`, to
    # convergence, in the run's `pretrain/` folder; the `trained` start then takes them (start_from).
    pretrain_loss: str | None = None
    pretrain_starts: tuple[str, ...] = ("discretised",)
    # the `trained` start's rate (the polish's too): its depth's × lr_decay^this; None: all `decays`
    # spent (the last rate)
    trained_decays_spent: int | None = None
    # The polish (polish.py; with `converge`): once every start has finished, each student's best start
    # trains on at this batch, to convergence; one more start, `polished`. 0: no polish.
    polish_batch: int = 0
    # Then the polish again from the same start with twice its budget (polish.py): a certificate that
    # does not depend on the schedule; one more start, `doubled`.
    budget_doubling: bool = False
    # The budget ladder (results/ladder.py): the last stage (the polish, else the sweep) again from the
    # same start at each of these multiples of its budget (the step count, and with a plateau test its
    # windows), in RUN/rung_x<k>/; the moves between rungs say how fast each student still converges.
    budget_rungs: tuple[int, ...] = ()
    seed: int = 0
    device: str = "auto"
    compile: bool = False  # torch.compile the population's step: ~40 s to compile, then faster
    cuda_graphs: bool = False  # on CUDA: the step captured once as a CUDA graph and replayed (training/graphs.py)
    save_students: bool | None = None  # None: keep the trained students when they are small
    checkpoint_every: int = 1000  # steps between a job's checkpoints (resume continues from the last)
    max_memory_gb: float | None = None  # per job; None: what the device has free. Bigger sweeps are cut into jobs

    @property
    def teacher_instances(self) -> list[tuple[str, int]]:
        """(teacher, replicate) of every teacher instance; a student names its teacher by index here."""
        replicates = range(self.first_replicate, self.first_replicate + self.replicates)
        return [(name, r) for name in self.teachers for r in replicates]

    def instance_key(self, instance: int) -> int:
        """The key of teacher instance `instance` in its students' random streams: its index in the
        grid that begins at replicate 0. So the parts of a grid of one teacher kind, split by
        replicate, start their students as the whole grid does."""
        grid = self.first_replicate + self.replicates
        return instance // self.replicates * grid + self.first_replicate + instance % self.replicates

    def student_lr(self, depth) -> float:
        return dict(self.depth_lr).get(depth, self.lr * depth ** (-self.lr_depth_exponent))

    def head_lr(self, depth) -> float:
        """A trained head's rate: lr, as the paper keeps it (a depth's own rate if it has one), or
        the blocks' rate with `head_lr_depth_scaled`."""
        return self.student_lr(depth) if self.head_lr_depth_scaled else dict(self.depth_lr).get(depth, self.lr)

    def protocol(self) -> dict:
        """The fields that decide the numbers (not where or how fast they are computed, nor what is kept)."""
        operational = {"device", "compile", "cuda_graphs", "save_students", "checkpoint_every", "max_memory_gb"}
        if self.pretrain_loss is not None:
            operational.add("start_from")  # the run's own pretrain folder, wherever the run is
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in operational}

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    def to_toml(self) -> str:
        """Every key as TOML that `--config` reads back to this same config (`run --show-config`).
        Unset keys (None) are comments: the file names the paper preset, where they are unset too."""
        def value(item):
            if isinstance(item, bool):
                return "true" if item else "false"
            if isinstance(item, tuple):
                return "[" + ", ".join(map(value, item)) + "]"
            return json.dumps(item)  # a TOML basic string, or a number
        lines = ['preset = "paper"  # the base every key below overrides']
        for key in (field.name for field in dataclasses.fields(self)):
            item = getattr(self, key)
            lines.append(f"# {key}: not set" if item is None else f"{key} = {value(item)}")
        return "\n".join(lines) + "\n"

    def replace(self, **changes) -> "SweepConfig":
        """A validated copy with `changes` applied; `None` values mean "keep"."""
        changes = {k: v for k, v in changes.items() if v is not None}
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ToymodelsError(f"unknown config key(s): {', '.join(sorted(unknown))}")
        return validate(settle_pretrain(dataclasses.replace(self, **_as_tuples(changes))))


def settle_pretrain(config: SweepConfig) -> SweepConfig:
    """A pretrain feeds the trained start with layers trained on another loss: without the trained
    start it has nothing to feed (none runs), and on the sweep's own loss it is the sweep itself
    (its starts train directly, in the trained start's place). So `--loss mse` or `--start zero` on
    the certified preset mean what they say."""
    if config.pretrain_loss == "none":  # as a file or the command line says no pretrain
        config = dataclasses.replace(config, pretrain_loss=None)
    if config.pretrain_loss is None or (config.pretrain_loss != config.loss and "trained" in config.starts):
        return config
    starts = pretrain_starts_in_place(config) if config.pretrain_loss == config.loss else config.starts
    return dataclasses.replace(config, pretrain_loss=None, starts=starts)


def pretrain_starts_in_place(config: SweepConfig) -> tuple[str, ...]:
    """The sweep's starts with the pretrain's in the trained start's place."""
    return tuple(dict.fromkeys(name for start in config.starts
                               for name in (config.pretrain_starts if start == "trained" else (start,))))


PRESETS = {
    # `toymodels run`'s default: certified students in minutes on 2 cores. The layers train on the
    # read-out states (MSE) from the teacher's discretised flow first, then on the sweep's loss from
    # there; a plateau test of 3 × 100 steps (a sweep's is 4 × 250) ends each stage
    "certified": SweepConfig(teachers=("tied",), temperatures=(0.1, 1.0), depths=(2, 4, 8, 16), replicates=3,
                             steps=20_000, batch=256, lr=4e-3, lr_depth_exponent=0.5, converge=True,
                             check_every=100, patience=3, decays=3, starts=("trained",), pretrain_loss="mse"),
    "quick": SweepConfig(teachers=("tied",), temperatures=(0.1, 1.0), depths=(2, 4, 8, 16), replicates=2,
                         steps=1000, batch=256, lr=1e-2, lr_depth_exponent=0.5, schedule="S",
                         test_batches=2, evals=15),  # a smoke test in about a minute on 2 cores: not certified
    "cpu": SweepConfig(temperatures=paper_temperatures(4), depths=(2, 4, 8, 16, 32), replicates=3, steps=10_000,
                       batch=512, lr=4e-3, lr_depth_exponent=0.5, schedule="S"),
    "paper": SweepConfig(),
}


def _as_tuples(changes: dict) -> dict:
    """Lists (from JSON or TOML) become tuples, nested ones too, so configs compare equal."""
    def frozen(value):
        return tuple(map(frozen, value)) if isinstance(value, (list, tuple)) else value
    return {k: frozen(v) for k, v in changes.items()}


def _conforms(value, kind) -> bool:
    """Whether `value` (from Python, TOML or JSON) is of the field type `kind`; ints pass as floats."""
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return any(_conforms(value, option) for option in typing.get_args(kind))
    if typing.get_origin(kind) is tuple:
        items = typing.get_args(kind)
        if not isinstance(value, tuple):
            return False
        if items[-1] is Ellipsis:
            return all(_conforms(item, items[0]) for item in value)
        return len(value) == len(items) and all(map(_conforms, value, items))
    if kind is type(None):
        return value is None
    if isinstance(value, bool):
        return kind is bool
    return isinstance(value, (int, float)) if kind is float else isinstance(value, kind)


def _describe(kind) -> str:
    names = {int: "a whole number", float: "a number", str: "text", bool: "true or false", type(None): "none"}
    if typing.get_origin(kind) in (typing.Union, types.UnionType):
        return " or ".join(_describe(option) for option in typing.get_args(kind))
    if typing.get_origin(kind) is tuple:
        items = typing.get_args(kind)
        if items[-1] is Ellipsis:
            return f"a list of {_describe(items[0]).removeprefix('a ')}s"
        return "a pair (" + ", ".join(_describe(item) for item in items) + ")"
    return names[kind]


def _numbers(value):
    """Every number inside a value (lists and pairs included)."""
    if isinstance(value, tuple):
        return [number for item in value for number in _numbers(item)]
    return [value] if isinstance(value, (int, float)) and not isinstance(value, bool) else []


def validate(config: SweepConfig) -> SweepConfig:
    """Raise ToymodelsError with one clear line for the first thing wrong with `config`."""
    for field in dataclasses.fields(config):
        value = getattr(config, field.name)
        if not _conforms(value, field.type):
            raise ToymodelsError(f"{field.name} must be {_describe(field.type)}, got {value!r}")
        if not all(math.isfinite(number) for number in _numbers(value)):
            raise ToymodelsError(f"{field.name} must be finite, got {value!r}")
    for name in ("seed", "first_replicate"):
        if not 0 <= getattr(config, name) <= MAX_COUNT:
            raise ToymodelsError(f"{name.replace('_', ' ')} must be a whole number ≥ 0, got {getattr(config, name)}")
    if not config.teachers:
        raise ToymodelsError("no teacher given")
    if config.precision not in PRECISIONS:
        raise ToymodelsError(f"unknown precision {config.precision!r}; choose from {', '.join(PRECISIONS)}")
    if not config.temperatures:
        raise ToymodelsError("no temperature given")
    if any(not t > 0 for t in config.temperatures):
        raise ToymodelsError("temperatures must be positive numbers")
    if not config.depths:
        raise ToymodelsError("no student depth given")
    if len(set(config.depths)) != len(config.depths):
        raise ToymodelsError("student depths must be distinct")
    if not 1 <= min(config.depths) <= max(config.depths) <= MAX_COUNT:
        raise ToymodelsError(f"student depths must be between 1 and {MAX_COUNT:.0e}")
    for name in ("teacher_depth", "width", "vocab", "replicates", "steps", "batch", "test_batches",
                 "test_batch_size", "evals", "checkpoint_every", "check_every", "patience", "race_from_step"):
        if not 1 <= getattr(config, name) <= MAX_COUNT:
            raise ToymodelsError(f"{name.replace('_', ' ')} must be between 1 and {MAX_COUNT:.0e}, "
                                 f"got {getattr(config, name)}")
    if not config.lr > 0:
        raise ToymodelsError(f"learning rate must be positive, got {config.lr}")
    for depth, rate in config.depth_lr:
        if depth not in config.depths or not rate > 0:
            raise ToymodelsError(f"depth-lr {depth}={rate}: needs one of the depths {config.depths} and a positive rate")
    if not 0 < config.lr_decay < 1:
        raise ToymodelsError(f"lr decay must be between 0 and 1, got {config.lr_decay}")
    if not config.race_margin > 0:
        raise ToymodelsError(f"race margin must be positive (a fraction above the leading start), got {config.race_margin}")
    if config.plateau_test not in PLATEAU_TESTS:
        raise ToymodelsError(f"unknown plateau test {config.plateau_test!r}; choose from {', '.join(PLATEAU_TESTS)}")
    if config.plateau_test == "trend" and config.patience < 2:
        raise ToymodelsError("the trend plateau test fits a line through patience + 1 windows: patience must be ≥ 2")
    if config.decays < 0 or not config.plateau_tolerance >= 0:
        raise ToymodelsError("decays and plateau tolerance must not be negative")
    if config.teacher_pool < 0 or 0 < config.teacher_pool < config.batch or config.teacher_pool > MAX_COUNT:
        raise ToymodelsError(f"teacher pool must be 0 (fresh samples) or at least the batch ({config.batch}), "
                             f"got {config.teacher_pool}")
    if config.pool_refresh < 0 or (config.pool_refresh and not config.teacher_pool):
        raise ToymodelsError(f"pool refresh must be 0 or a number of steps, with a teacher pool; got "
                             f"{config.pool_refresh} with a pool of {config.teacher_pool}")
    if not config.starts or len(set(config.starts)) != len(config.starts):
        raise ToymodelsError(f"starts must be distinct names, at least one; got {config.starts}")
    if config.pretrain_loss is not None:  # settled: another loss than the sweep's, with the trained start
        if not config.converge:
            raise ToymodelsError(f"a pretrain on {config.pretrain_loss} trains the layers to convergence, for the "
                                 f"trained start: give --converge with it")
        if not config.pretrain_starts or len(set(config.pretrain_starts)) != len(config.pretrain_starts) \
                or "trained" in config.pretrain_starts:
            raise ToymodelsError(f"pretrain starts must be distinct names other than trained, at least one; got "
                                 f"{config.pretrain_starts}")
    elif ("trained" in config.starts) != (config.start_from is not None):  # starts.TRAINED_START
        raise ToymodelsError("the trained start and --start-from RUN (a finished run that kept its students) "
                             "go together: give both or neither (or --pretrain-loss, whose run it takes)")
    if config.trained_decays_spent is not None and not 0 <= config.trained_decays_spent <= config.decays:
        raise ToymodelsError(f"trained decays spent must be between 0 and decays ({config.decays}), "
                             f"got {config.trained_decays_spent}")
    if not 0 <= config.polish_batch <= MAX_COUNT or (config.polish_batch and not config.converge):
        raise ToymodelsError(f"polish batch must be 0 (no polish) or a batch size, with --converge (the plateau "
                             f"test ends the polish); got {config.polish_batch}"
                             f"{'' if config.converge else ' without --converge'}")
    if config.budget_doubling and not config.polish_batch:
        raise ToymodelsError("budget doubling repeats the polish with twice its budget: give --polish-batch too")
    if config.budget_rungs and (min(config.budget_rungs) < 2 or list(config.budget_rungs) != sorted(set(config.budget_rungs))):
        raise ToymodelsError(f"budget rungs must be increasing multiples of the budget, each at least 2 (the budget "
                             f"itself is the first rung), e.g. [2, 4]; got {list(config.budget_rungs)}")
    if config.budget_rungs and config.budget_doubling:
        raise ToymodelsError("budget doubling is the ladder's rung 2 of the polish: give budget rungs or budget "
                             "doubling, not both")
    if config.max_memory_gb is not None and not config.max_memory_gb > 0:
        raise ToymodelsError(f"max memory must be positive, got {config.max_memory_gb} GB")
    return config


def read_config_file(path) -> dict:
    """The raw contents of a TOML config, or of a run folder's config.json."""
    path = Path(path)
    try:
        text = path.read_text()
        keys = json.loads(text) if path.suffix == ".json" else tomllib.loads(text)
    except OSError as error:
        raise ToymodelsError(f"cannot read config {path}: {error.strerror}") from None
    except (ValueError, tomllib.TOMLDecodeError) as error:  # UnicodeDecodeError is a ValueError
        raise ToymodelsError(f"config {path} is not valid: {error}") from None
    if not isinstance(keys, dict):
        raise ToymodelsError(f"config {path} must hold keys and values, not a {type(keys).__name__}")
    return keys


def resolve_config(preset="quick", file=None, **overrides) -> SweepConfig:
    """Preset, then the keys of a config file (TOML, or a run's config.json), then overrides
    (None = not given)."""
    return config_from_keys(read_config_file(file) if file else {}, preset, **overrides)


def config_from_keys(keys: dict, preset="quick", **overrides) -> SweepConfig:
    """A preset (`keys` may name its own), then `keys`, then overrides (None = not given)."""
    keys = dict(keys)
    preset = keys.pop("preset", preset)
    if preset not in PRESETS:
        raise ToymodelsError(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}")
    return PRESETS[preset].replace(**keys).replace(**overrides)
