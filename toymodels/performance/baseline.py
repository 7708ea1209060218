"""The usual way, kept as a yardstick: students trained one at a time, each an nn.Module with
nn.Linear layers and its own torch.optim.Adam, each recomputing its own teacher every step.

It draws exactly the numbers the population engine draws (the same seeded streams) and asks the
same loss object for its targets and loss (with a model axis of one), so the two agree to float
precision (a test), and `toymodels bench` times one against the other.
"""

import torch
from torch import nn

from ..models.blocks import rmsnorm
from ..models.streams import TRAIN_DATA_STREAM, seeded_generator
from ..models.students import StudentSpec, student_stream
from ..models.weights import default_layers
from ..training.population import Population


class ResidualMLP(nn.Module):
    def __init__(self, w_in, b_in, w_out):
        super().__init__()
        width, hidden = w_in.shape
        self.up, self.down = nn.Linear(width, hidden), nn.Linear(hidden, width, bias=False)
        with torch.no_grad():  # nn.Linear keeps (out, in) weights; ours are (in, out)
            self.up.weight.copy_(w_in.T)
            self.up.bias.copy_(b_in.flatten())
            self.down.weight.copy_(w_out.T)

    def forward(self, h):
        return self.down(torch.relu(self.up(rmsnorm(h))).square())


class SingleStudent(nn.Module):
    """One Euler student of the paper, written the plain way."""

    def __init__(self, protocol, spec: StudentSpec, vocab: int | None):
        super().__init__()
        width = protocol.config.width
        init = default_layers(spec.depth, width, student_stream(protocol, spec))
        self.blocks = nn.ModuleList(
            ResidualMLP(init.w_in[k], init.b_in[k], torch.zeros_like(init.w_out[k])) for k in range(spec.depth)
        )
        self.head = nn.Linear(width, vocab, bias=False) if vocab else None
        if self.head is not None:
            nn.init.zeros_(self.head.weight)

    def forward(self, x):
        h = rmsnorm(x)
        for block in self.blocks:
            h = h + block(h)
        return rmsnorm(h)


class SingleStudentRun:
    """One student of a population with everything it needs: its teacher's weights and head, its
    temperature, its data stream."""

    def __init__(self, population: Population, spec: StudentSpec):
        config = population.config
        if config.student != "euler":
            raise ValueError("the baseline covers the Euler student only")
        self.config, self.spec, self.objective, self.device = config, spec, population.loss, population.device
        teachers = population.teachers
        _, replicate = teachers.instances[spec.instance]
        self.teacher = [w[:, spec.instance] for w in (teachers.w_in, teachers.b_in, teachers.w_out)]
        self.teacher_head = None if teachers.head is None else teachers.head[spec.instance : spec.instance + 1]
        temperature = population.protocol.temperatures[spec.temperature_index]
        self.temperature = torch.full((1, 1, 1), temperature, device=self.device)
        self.student = SingleStudent(population.protocol, spec, self.objective.student_head_width(config))
        self.student.to(self.device)
        self.stream = seeded_generator(config.seed, TRAIN_DATA_STREAM, replicate, device=self.device)
        head = [] if self.student.head is None else list(self.student.head.parameters())
        blocks = [p for p in self.student.parameters() if all(p is not h for h in head)]
        self.optimizer = torch.optim.Adam(
            [
                {"params": blocks, "base_lr": config.student_lr(spec.depth)},
                {"params": head, "base_lr": config.head_lr(spec.depth)},
            ],
            lr=0.0,
        )
        self.schedule = population.protocol.schedule

    def teacher_readout(self, x):
        h = rmsnorm(x)
        for w_in, b_in, w_out in zip(*self.teacher):
            h = h + torch.relu(rmsnorm(h) @ w_in + b_in).square() @ w_out
        return rmsnorm(h)

    def loss(self, x):
        """The student's loss on inputs x (batch, width), through the sweep's loss object."""
        with torch.no_grad():
            targets = self.objective.teacher_targets(
                self.teacher_readout(x)[None], self.teacher_head, self.temperature.view(1)
            )
        head = None if self.student.head is None else self.student.head.weight.T[None]
        return self.objective.losses(
            self.student(x)[None],
            targets,
            head,
            self.teacher_head,
            torch.zeros(1, dtype=torch.long, device=self.device),
            self.temperature,
        )[0]

    def train(self, steps: int) -> None:
        for step in range(steps):
            multiplier = self.schedule(torch.tensor(step, dtype=torch.float64), self.config.steps).item()
            for group in self.optimizer.param_groups:
                group["lr"] = group["base_lr"] * multiplier
            x = torch.randn(self.config.batch, self.config.width, generator=self.stream, device=self.device)
            self.optimizer.zero_grad()
            self.loss(x).backward()
            self.optimizer.step()
