"""A population: the teachers, students and loss of a sweep (or of one job of it) on one device,
and the fixed test set they are evaluated on. It computes losses; it does not train (the
engine does), so diagnostics can evaluate trained students without an optimiser.
"""

from contextlib import contextmanager
from dataclasses import replace

import torch

from ..config import SweepConfig
from ..errors import ToymodelsError
from ..models.blocks import rmsnorm
from ..models.starts import REFERENCE_START
from ..models.streams import TEST_DATA_STREAM, seeded_generator
from ..models.students import Students, StudentSpec
from ..models.teachers import Teachers
from .compiler import compile_for_rebuilds
from .jobs import Job
from .progress import stage
from .protocol import Protocol


def draw_inputs(generators: list[torch.Generator], batch: int, width: int, device) -> torch.Tensor:
    """Fresh x ~ N(0, I) for each teacher instance: (instances, batch, width)."""
    return torch.stack([torch.randn(batch, width, generator=g, device=device) for g in generators])


class Population:
    def __init__(
        self,
        protocol: SweepConfig | Protocol,
        device: torch.device,
        job: Job | None = None,
        specs: list[StudentSpec] | None = None,
        reuse: "Population | None" = None,
        weights_from: Students | None = None,
    ):
        """The students `specs` (default: every student of `job`, default the whole sweep) of
        `protocol` (a config is resolved here) and the teacher instances they learn from; the
        teachers and test set of `reuse` when it has the same teacher instances, and the weights
        of the students `weights_from` holds (both: a population that some students left)."""
        self.protocol = protocol = Protocol.of(protocol)
        config = self.config = protocol.config
        self.device, self.job = device, job or Job.whole(protocol)
        self.loss = protocol.loss
        specs = specs or self.job.students()
        self.students = Students(protocol, specs, weights_from).to(device)
        self.specs = self.students.specs  # population order
        instances = sorted({s.instance for s in self.specs})
        same_teachers = reuse is not None and reuse.instances == instances
        self.instances = instances
        self.teachers = reuse.teachers if same_teachers else Teachers(protocol, device, only=instances)
        local = {instance: k for k, instance in enumerate(instances)}  # row in self.teachers
        self.student_instances = torch.tensor([local[s.instance] for s in self.specs], device=device)
        temperature_indices = torch.tensor([s.temperature_index for s in self.specs], device=device)
        self.temperatures = torch.tensor(protocol.temperatures, dtype=torch.float32, device=device)
        self.target_rows = self.loss.target_rows(self.student_instances, temperature_indices, len(self.temperatures))
        self.student_temperatures = self.temperatures[temperature_indices].view(-1, 1, 1)
        if config.compile:  # fuses the element-wise work around the matmuls (forward and backward)
            self.losses = compile_for_rebuilds(self.losses)
        # What labels the training data: compiled with the step, the teachers' 128 layers of
        # element-wise work fuse too (labelling ≈ 25 % faster on the CPU); kept by a rebuilt population.
        self.teacher_readouts = (
            reuse.teacher_readouts
            if same_teachers
            else (compile_for_rebuilds(self.teachers.forward) if config.compile else self.teachers.forward)
        )
        if same_teachers:
            self.test_inputs, self.test_targets = reuse.test_inputs, reuse.test_targets
        else:
            self.test_inputs = draw_inputs(
                [seeded_generator(config.seed, TEST_DATA_STREAM, r, device=device) for _, r in self.teachers.instances],
                config.test_batches * config.test_batch_size,
                config.width,
                device,
            )
            self.test_targets = [
                self.teacher_targets(x)
                for x in stage("labelling the test set", self.test_inputs.split(config.test_batch_size, dim=1))
            ]

    def teacher_targets(self, inputs: torch.Tensor) -> torch.Tensor:
        """What the students learn from inputs (instances, batch, width): each teacher runs once."""
        return self.targets_from_readout(self.teachers.forward(inputs))

    def targets_from_readout(self, readout: torch.Tensor) -> torch.Tensor:
        """The targets of the teachers' read-outs rmsnorm(h_L): (instances, batch, width)."""
        return self.loss.teacher_targets(readout, self.teachers.head, self.temperatures)

    def losses(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """One loss per student for inputs (instances, batch, width) and the teachers' targets."""
        readout = rmsnorm(self.students(rmsnorm(inputs)[self.student_instances]))
        return self.loss.losses(
            readout,
            targets[self.target_rows],
            self.students.head,
            self.teachers.head,
            self.student_instances,
            self.student_temperatures,
        )

    @contextmanager
    def precision(self):
        """The config's matmul precision: tf32 lets fp32 matmuls round their inputs to TensorFloat-32
        (GPU); bf16 runs the networks under bf16 autocast. Weights, losses and Adam stay fp32."""
        previous = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high" if self.config.precision == "tf32" else previous)
        try:
            # no cast cache: a CUDA graph must not capture casts made before it (cuda_graphs.py)
            with torch.autocast(
                self.device.type, torch.bfloat16, enabled=self.config.precision == "bf16", cache_enabled=False
            ):
                yield
        finally:
            torch.set_float32_matmul_precision(previous)

    @torch.no_grad()
    def test_losses(self) -> torch.Tensor:
        """Each student's loss on the fixed test set."""
        return self.test_chunk_losses().mean(0)

    def test_chunk_losses(self, chunk: int | None = None) -> torch.Tensor:
        """Each student's mean loss on each `chunk` samples of the test set (default: one test
        batch): (chunks, students). Their spread over chunks gives the test loss's standard error."""
        chunk = chunk or self.config.test_batch_size
        if self.config.test_batch_size % chunk:
            raise ToymodelsError(
                f"a chunk of {chunk} samples does not divide a test batch of {self.config.test_batch_size}"
            )
        pieces = [
            (x, targets)
            for batch, batch_targets in zip(
                self.test_inputs.split(self.config.test_batch_size, dim=1), self.test_targets
            )
            for x, targets in zip(batch.split(chunk, dim=1), batch_targets.split(chunk, dim=1))
        ]
        with self.precision():
            return torch.stack([self.losses(x, targets) for x, targets in pieces])

    def reference_losses(self) -> torch.Tensor:
        """Each student's reference: the test loss of the same student (teacher instance,
        temperature, depth) at the `discretised` start, untrained. A trained student above it
        did not reach the best its architecture can do (certification.certify)."""
        specs = list(dict.fromkeys(replace(spec, start=REFERENCE_START) for spec in self.specs))
        # evaluated once: compiling it would cost more than it saves
        reference = Population(self.protocol.replace(compile=False), self.device, self.job, specs, reuse=self)
        losses = reference.test_losses()
        position = {replace(spec, start="zero"): m for m, spec in enumerate(reference.specs)}
        return losses[[position[replace(spec, start="zero")] for spec in self.specs]]
