"""A sweep's whole protocol in one frozen object, the presets, and the rules between its fields.

Every knob of the paper's protocol is a field; `PRESETS["paper"]` holds the paper's values
(Fig. 3b), `quick` and `cpu` reduced versions that run on a laptop. A config is resolved once
(preset → file → command-line overrides), checked, and written next to the results. Each field
declares its own type, range and meaning (`settings.setting`), which settings.py checks.

This module is a leaf: it names components (teacher, student, loss, schedule, start) but does not look
them up; `training.protocol.Protocol.of` resolves them, once, before anything is written or trained.
"""

import dataclasses
import difflib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tomllib

from .errors import ToymodelsError
from .settings import MAX_COUNT, Constraint, declared_problem, setting

PRECISIONS = ("fp32", "tf32", "bf16")
PLATEAU_TESTS = ("relative", "trend")  # training/trainer.py's rules, by the name a config gives
BACKENDS = ("local", "dask")  # where a sweep's jobs run (workflows/parallel.py): worker processes, or a dask cluster


def paper_temperatures(count: int = 16) -> tuple[float, ...]:
    return tuple(round(float(t), 6) for t in np.logspace(-2, 0, count))


COUNT = dict(low=1, high=MAX_COUNT)  # a count of steps, samples, teachers, …
INDEX = dict(low=0, high=MAX_COUNT)  # a seed, an index, a number of steps that may be 0


@dataclass(frozen=True)
class SweepConfig:
    teachers: tuple[str, ...] = setting(
        ("independent",),
        "Teacher dynamics, comma-separated; parameters in parentheses, e.g. 'correlated(rho=0.5)'; "
        "your own as file.py:function.",
        names="teacher",
        option="--teacher",
        distinct=True,
        empty="no teacher given",
    )
    student: str = setting(
        "euler",
        "Student architecture; your own as file.py:NAME (worked examples: python -m toymodels.examples).",
        names="student",
    )
    loss: str = setting("kl", "Training loss; your own as file.py:NAME.", names="loss")
    temperatures: tuple[float, ...] = setting(
        paper_temperatures(),
        "Target temperatures, e.g. 0.1,1.0 (a loss without them, MSE, ignores them).",
        option="--temps",
        positive=True,
        distinct=True,
        empty="no temperature given",
    )
    depths: tuple[int, ...] = setting(
        (6, 12, 16, 24, 32, 48),
        "Student depths, e.g. 2,4,8,16 (blocks, for rk2).",
        **COUNT,
        distinct=True,
        empty="no student depth given",
    )
    teacher_depth: int = setting(128, "Teacher depth (the paper's: 128).", **COUNT)
    width: int = setting(32, "Width of the residual stream.", **COUNT)
    vocab: int = setting(128, "Vocabulary of the read-out (the KL's targets).", **COUNT)
    replicates: int = setting(3, "Random teachers per setting.", **COUNT)
    first_replicate: int = setting(
        0,
        "The first teacher's replicate index: a grid split by replicate runs the others apart, on the same teachers.",
        **INDEX,
    )
    steps: int = setting(40_000, "Training steps (with --converge: the budget).", **COUNT)
    batch: int = setting(1024, "Batch size.", **COUNT)
    lr: float = setting(6e-4, "Base learning rate (a depth-ℓ student uses lr·ℓ^-exponent).", positive=True)
    lr_depth_exponent: float = setting(0.0, "0: same rate at every depth; 0.5: lr/√ℓ.")
    depth_lr: tuple[tuple[int, float], ...] = setting(
        (), "The learning rate of students of one depth, instead of the rule above (repeatable).", metavar="DEPTH=RATE"
    )
    schedule: str = setting(
        "constant",
        "Learning-rate schedule (S: flat 80 %, then linear to 10 %; G: flat 25 %, "
        "then geometric to 1 %); your own as file.py:NAME.",
        names="schedule",
    )
    optimizer: str = setting(
        "adam",
        "Optimiser (adam: PyTorch's Adam; muon: Muon on the layers' weight matrices, "
        "Adam on the rest, at the same rates); your own as file.py:NAME.",
        names="optimizer",
    )
    precision: str = setting(
        "fp32",
        "Matmul precision: fp32; tf32 or bf16 (autocast) are faster on recent GPUs but "
        "round matmul inputs to 10 or 7 mantissa bits, which blurs loss differences "
        "below about 1e-3 relative.",
        choices=PRECISIONS,
    )
    test_batches: int = setting(10, "Batches of the fixed test set.", **COUNT)
    test_batch_size: int = setting(1024, "Samples per test batch.", **COUNT)
    evals: int = setting(30, "Evaluation points, spaced geometrically in steps.", **COUNT)
    head_lr_depth_scaled: bool = setting(
        False, "A trained head's rate: lr (the paper's), or lr·ℓ^-exponent like the blocks."
    )
    # Training to convergence: `steps` is then a budget. Every `check_every` steps each student's mean
    # training loss goes to the plateau test; `patience` windows without improvement make a plateau,
    # answered by multiplying its rate by `lr_decay`, `decays` times; the plateau after the last decay
    # means converged, and the student leaves the population. One still improving at the budget is capped.
    converge: bool = setting(
        False,
        "Train each student until a plateau test on its own loss says it converged "
        "(rate decays at plateaus; converged students leave the population); --steps "
        "is then the budget.",
    )
    check_every: int = setting(250, "With --converge: steps per plateau-test window.", **COUNT)
    patience: int = setting(4, "With --converge: windows without improvement that make a plateau.", **COUNT)
    plateau_tolerance: float = setting(0.01, "With --converge: the relative improvement a plateau stays under.", low=0)
    plateau_test: str = setting(
        "relative",
        "relative: a window that beats the best by the tolerance resets the patience (noise hastens "
        "the verdict); trend: the improvement over patience windows, from the trend of the last patience + 1, "
        "under the tolerance with 95 % confidence (noise delays it). See training/trainer.py.",
        choices=PLATEAU_TESTS,
    )
    lr_decay: float = setting(0.25, "With --converge: the rate's factor at each plateau.", positive=True, below=1)
    decays: int = setting(3, "With --converge: rate decays before the last plateau means converged.", **INDEX)
    teacher_pool: int = setting(
        0,
        "0: fresh teacher samples every step (the paper's); N: each step draws its batch "
        "from N samples the teachers labelled once (much faster on a CPU).",
        **INDEX,
    )
    pool_refresh: int = setting(
        0,
        "With --teacher-pool: relabel the pool with fresh inputs every N steps, so "
        "students do not fit its samples; 0: never.",
        **INDEX,
    )
    starts: tuple[str, ...] = setting(
        ("zero",),
        "Where students begin, comma-separated to train each student from several (discretised: the "
        "teacher's own flow in ℓ steps; trained: another run's trained students, see --start-from); your own as "
        "file.py:NAME.",
        names="start",
        option="--start",
        distinct=True,
        empty="no start given",
    )
    race: bool = setting(
        True,
        "With --converge and several starts: stop a start once the leading start of its "
        "student has converged and it stays more than race_margin above it, unable to catch "
        "up by the budget at its recent rate; recorded as stopped behind, with its gap "
        "(training/racing.py).",
        pair=True,
    )
    race_margin: float = setting(
        0.5, "Racing: how far above its leading start (a fraction) a start stops.", positive=True
    )
    race_from_step: int = setting(3000, "Racing: the step from which a start may stop.", **COUNT)
    start_from: str | None = setting(
        None,
        "With --start trained: the finished run (same seed, teachers and architecture, any loss) whose "
        "trained students the trained start takes its layers from; it must have kept them.",
        metavar="RUN",
        path=True,
    )
    pretrain_loss: str | None = setting(
        None,
        "With --converge and --start trained: first train every student's layers on this loss (e.g. mse, "
        "the read-out states, which low-temperature KL targets stall short of) to convergence, in RUN/pretrain "
        "(workflows/stages.py); the trained start then takes them; none: no pretrain.",
        stage_reset=None,
    )
    pretrain_starts: tuple[str, ...] = setting(
        ("discretised",),
        "With --pretrain-loss: the pretrain's starts, comma-separated.",
        names="start",
        option="--pretrain-start",
        distinct=True,
    )
    trained_decays_spent: int | None = setting(
        None,
        "The trained start's rate (and the polish's): its depth's × lr_decay^this; unset: all decays spent "
        "(the last rate).",
        **INDEX,
    )
    polish_batch: int = setting(
        0,
        "With --converge: once every start has finished, each student's best start "
        "trains on at this batch to convergence (one more start, 'polished'; "
        "workflows/polish.py); 0: no polish.",
        **INDEX,
        stage_reset=0,
    )
    budget_doubling: bool = setting(
        False,
        "With --polish-batch: then the polish again from the same start with twice its budget (every "
        "plateau window and the step cap twice as long); a student whose loss moves by more than its test set's "
        "noise + 5 % is not budget-certified (RUN/budget_doubling.csv).",
        stage_reset=False,
    )
    budget_rungs: tuple[int, ...] = setting(
        (),
        "The budget ladder, e.g. 2,4: then the last stage (the polish, else the sweep) again from the same "
        "start at 2× and 4× its budget (steps, and plateau windows), in RUN/rung_x2, RUN/rung_x4; `toymodels "
        "ladder RUN` extrapolates each student's converged loss from the rungs (a run may add rungs later).",
        stage_reset=(),
    )
    rung_depth_limits: tuple[int, ...] = setting(
        (),
        "The deepest student each rung of --budget-rungs trains, one per rung, e.g. 48,48,48,24: rung ×16 "
        "at ℓ ≤ 24 only, where its ratio can still decide, and no compute spent where it cannot; empty: every "
        "depth on every rung.",
        positive=True,
        stage_reset=(),
    )
    seed: int = setting(0, "Seed of every random draw; same seed, same numbers.", **INDEX)
    device: str = setting("auto", "auto (a GPU when there is one), cpu, cuda, cuda:N.", operational=True)
    compile: bool = setting(
        False,
        "torch.compile the training step and the teachers' labelling: about 1 min to "
        "compile, and again when converged students leave; then ≈ 1.6× faster on the "
        "CPU. The numbers agree with an eager run's to float precision.",
        operational=True,
    )
    cuda_graphs: bool = setting(
        False,
        "On a GPU, capture the training step once as a CUDA graph and replay it: one "
        "launch instead of hundreds per step (training/cuda_graphs.py); ignored on a CPU.",
        pair=True,
        operational=True,
    )
    save_students: bool | None = setting(
        None,
        "Keep the trained students (students.pt) [default: when under 50 MB].",
        pair=True,
        operational=True,
        stage_reset=True,
    )  # the stage after reads them
    checkpoint_every: int = setting(
        1000, "Steps between a job's checkpoints (a resume continues from the last).", **COUNT, operational=True
    )
    max_memory_gb: float | None = setting(
        None,
        "GB a job may use; a bigger sweep is cut into more jobs [default: 70 % of what the device has free].",
        positive=True,
        option="--max-memory",
        operational=True,
    )

    @property
    def teacher_instances(self) -> list[tuple[str, int]]:
        """(teacher, replicate) of every teacher instance; a student names its teacher by index here."""
        replicates = range(self.first_replicate, self.first_replicate + self.replicates)
        return [(name, r) for name in self.teachers for r in replicates]

    def rung_depths(self) -> dict[int, tuple[int, ...]]:
        """The depths each rung of the budget ladder trains (`rung_depth_limits`; all of them by default)."""
        limits = self.rung_depth_limits or (max(self.depths),) * len(self.budget_rungs)
        return {rung: tuple(d for d in self.depths if d <= limit) for rung, limit in zip(self.budget_rungs, limits)}

    def student_lr(self, depth) -> float:
        return dict(self.depth_lr).get(depth, self.lr * depth ** (-self.lr_depth_exponent))

    def head_lr(self, depth) -> float:
        """A trained head's rate: lr, as the paper keeps it (a depth's own rate if it has one), or
        the blocks' rate with `head_lr_depth_scaled`."""
        return self.student_lr(depth) if self.head_lr_depth_scaled else dict(self.depth_lr).get(depth, self.lr)

    def protocol(self) -> dict:
        """The fields that decide the numbers (not where or how fast they are computed, nor what is kept)."""
        operational = {field.name for field in dataclasses.fields(self) if field.metadata["operational"]}
        if self.pretrain_loss is not None:
            operational.add("start_from")  # the run's own pretrain folder, wherever the run is
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in operational}

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    def to_toml(self, preset: str | None = None) -> str:
        """Every key as TOML that `--config` reads back to this same config (`run --show-config`).
        Unset keys (None) are comments, so the file names a preset where they are unset too: `preset`
        (the one the config was built from) where it can, else the first in PRESETS that can."""

        def value(item):
            if isinstance(item, bool):
                return "true" if item else "false"
            if isinstance(item, tuple):
                return "[" + ", ".join(map(value, item)) + "]"
            return json.dumps(item)  # a TOML basic string, or a number

        unset = [field.name for field in dataclasses.fields(self) if getattr(self, field.name) is None]
        base = next(
            name
            for name in ([preset] if preset in PRESETS else []) + list(PRESETS)
            if all(getattr(PRESETS[name], key) is None for key in unset)
        )
        lines = [f'preset = "{base}"  # the base every key below overrides']
        for key in (field.name for field in dataclasses.fields(self)):
            item = getattr(self, key)
            lines.append(f"# {key}: not set" if item is None else f"{key} = {value(item)}")
        return "\n".join(lines) + "\n"

    def stage(self, **changes) -> "SweepConfig":
        """The config of a stage trained inside this run (its pretrain, polish or a rung): every field
        that declares a `stage_reset` takes it (a stage runs no stages of its own, and keeps its
        students for the next), then `changes` (None values included: they unset)."""
        resets = {
            field.name: field.metadata["stage_reset"]
            for field in dataclasses.fields(self)
            if field.metadata["stage_reset"] is not dataclasses.MISSING
        }
        return validate(settle_pretrain(dataclasses.replace(self, **_as_tuples({**resets, **changes}))))

    def replace(self, **changes) -> "SweepConfig":
        """A validated copy with `changes` applied; `None` values mean "keep"."""
        changes = {k: v for k, v in changes.items() if v is not None}
        keys = [f.name for f in dataclasses.fields(self)]
        unknown = sorted(set(changes) - set(keys))
        if unknown:
            hints = [
                f"{key} (did you mean {close[0]}?)" if (close := difflib.get_close_matches(key, keys, n=1)) else key
                for key in unknown
            ]
            raise ToymodelsError(f"unknown config key(s): {', '.join(hints)}")
        # each field is checked before the pretrain is settled, which may drop one the run does not use
        return validate(settle_pretrain(check_fields(dataclasses.replace(self, **_as_tuples(changes)))))


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
    return tuple(
        dict.fromkeys(
            name for start in config.starts for name in (config.pretrain_starts if start == "trained" else (start,))
        )
    )


PRESETS = {
    # `toymodels run`'s default: certified students in minutes on 2 cores. The layers train on the
    # read-out states (MSE) from the teacher's discretised flow first, then on the sweep's loss from
    # there; a plateau test of 3 × 100 steps (a sweep's is 4 × 250) ends each stage
    "certified": SweepConfig(
        teachers=("tied",),
        temperatures=(0.1, 1.0),
        depths=(2, 4, 8, 16),
        replicates=3,
        steps=20_000,
        batch=256,
        lr=4e-3,
        lr_depth_exponent=0.5,
        converge=True,
        check_every=100,
        patience=3,
        decays=3,
        starts=("trained",),
        pretrain_loss="mse",
    ),
    "quick": SweepConfig(
        teachers=("tied",),
        temperatures=(0.1, 1.0),
        depths=(2, 4, 8, 16),
        replicates=2,
        steps=1000,
        batch=256,
        lr=1e-2,
        lr_depth_exponent=0.5,
        schedule="S",
        test_batches=2,
        evals=15,
    ),  # a smoke test in about a minute on 2 cores: not certified
    "cpu": SweepConfig(
        temperatures=paper_temperatures(4),
        depths=(2, 4, 8, 16, 32),
        replicates=3,
        steps=10_000,
        batch=512,
        lr=4e-3,
        lr_depth_exponent=0.5,
        schedule="S",
    ),
    "paper": SweepConfig(),
}


def _as_tuples(changes: dict) -> dict:
    """Lists (from JSON or TOML) become tuples, nested ones too, so configs compare equal."""

    def frozen(value):
        return tuple(map(frozen, value)) if isinstance(value, (list, tuple)) else value

    return {k: frozen(v) for k, v in changes.items()}


CONSTRAINTS = (
    Constraint(
        lambda c: any(depth not in c.depths for depth, _ in c.depth_lr) or any(not rate > 0 for _, rate in c.depth_lr),
        lambda c: f"depth-lr {dict(c.depth_lr)}: each needs one of the depths {c.depths} and a positive rate",
    ),
    Constraint(
        lambda c: c.plateau_test == "trend" and c.patience < 2,
        lambda c: "the trend plateau test fits a line through patience + 1 windows: patience must be ≥ 2",
    ),
    Constraint(
        lambda c: 0 < c.teacher_pool < c.batch,
        lambda c: f"teacher pool must be 0 (fresh samples) or at least the batch ({c.batch}), got {c.teacher_pool}",
    ),
    Constraint(
        lambda c: bool(c.pool_refresh) and not c.teacher_pool,
        lambda c: f"pool refresh must be 0 or a number of steps, with a teacher pool; got {c.pool_refresh} "
        f"with a pool of {c.teacher_pool}",
    ),
    Constraint(
        lambda c: c.pretrain_loss is not None and not c.converge,  # settled: another loss, the trained start
        lambda c: f"a pretrain on {c.pretrain_loss} trains the layers to convergence, for the trained start: "
        f"give --converge with it",
    ),
    Constraint(
        lambda c: c.pretrain_loss is not None and (not c.pretrain_starts or "trained" in c.pretrain_starts),
        lambda c: f"pretrain starts must be distinct names other than trained, at least one; got {c.pretrain_starts}",
    ),
    Constraint(
        lambda c: c.pretrain_loss is None and ("trained" in c.starts) != (c.start_from is not None),
        lambda c: "the trained start and --start-from RUN (a finished run that kept its students) go together: "
        "give both or neither (or --pretrain-loss, whose run it takes)",
    ),
    Constraint(
        lambda c: c.trained_decays_spent is not None and c.trained_decays_spent > c.decays,
        lambda c: f"trained decays spent must be between 0 and decays ({c.decays}), got {c.trained_decays_spent}",
    ),
    Constraint(
        lambda c: bool(c.polish_batch) and not c.converge,
        lambda c: f"polish batch must be 0 (no polish) or a batch size, with --converge (the plateau test ends "
        f"the polish); got {c.polish_batch} without --converge",
    ),
    Constraint(
        lambda c: c.budget_doubling and not c.polish_batch,
        lambda c: "budget doubling repeats the polish with twice its budget: give --polish-batch too",
    ),
    Constraint(
        lambda c: list(c.budget_rungs) != sorted(set(c.budget_rungs)) or min(c.budget_rungs, default=2) < 2,
        lambda c: f"budget rungs must be increasing multiples of the budget, each at least 2 (the budget "
        f"itself is the first rung), e.g. [2, 4]; got {list(c.budget_rungs)}",
    ),
    Constraint(
        lambda c: bool(c.rung_depth_limits)
        and (len(c.rung_depth_limits) != len(c.budget_rungs) or min(c.rung_depth_limits) < min(c.depths)),
        lambda c: f"rung depth limits must be one deepest depth per budget rung ({len(c.budget_rungs)}: "
        f"{list(c.budget_rungs)}), each at least the shallowest depth {min(c.depths)}; got "
        f"{list(c.rung_depth_limits)}",
    ),
    Constraint(
        lambda c: bool(c.budget_rungs) and c.budget_doubling,
        lambda c: "budget doubling is the ladder's rung 2 of the polish: give budget rungs or budget doubling, "
        "not both",
    ),
)


def check_fields(config: SweepConfig) -> SweepConfig:
    """Raise ToymodelsError with one clear line for the first field of `config` that breaks its own
    declaration (type, finiteness, range, choices)."""
    for field in dataclasses.fields(config):
        problem = declared_problem(field.name, getattr(config, field.name), field.type, field.metadata)
        if problem:
            raise ToymodelsError(problem)
    return config


def validate(config: SweepConfig) -> SweepConfig:
    """Raise ToymodelsError with one clear line for the first thing wrong with `config`: a field
    against its own declaration, then the rules between fields."""
    check_fields(config)
    broken = next((constraint for constraint in CONSTRAINTS if constraint.broken(config)), None)
    if broken:
        raise ToymodelsError(broken.message(config))
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
