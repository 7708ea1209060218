"""The usual way, kept as a yardstick: students trained one at a time, each an nn.Module with
nn.Linear layers and its own torch.optim.Adam, each recomputing its own teacher every step.

It draws exactly the numbers the population engine draws (the same seeded streams), so the two
agree to float precision (a test), and `toymodels bench` times one against the other.
"""

import torch
import torch.nn.functional as F
from torch import nn

from .blocks import rmsnorm, seeded_generator
from .config import SweepConfig
from .optim import schedule_multiplier
from .students import StudentSpec
from .teachers import STUDENT_STREAM, TRAIN_DATA_STREAM, Teachers, default_layers


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

    def __init__(self, spec: StudentSpec, width: int, vocab: int | None, seed: int):
        super().__init__()
        init = default_layers(spec.depth, width, seeded_generator(
            seed, STUDENT_STREAM, spec.instance, spec.temperature_index, spec.depth))
        self.blocks = nn.ModuleList(ResidualMLP(init.w_in[l], init.b_in[l], torch.zeros_like(init.w_out[l]))
                                    for l in range(spec.depth))
        self.head = nn.Linear(width, vocab, bias=False) if vocab else None
        if self.head is not None:
            nn.init.zeros_(self.head.weight)

    def forward(self, x):
        h = rmsnorm(x)
        for block in self.blocks:
            h = h + block(h)
        return rmsnorm(h)


class SingleStudentRun:
    """One student of a sweep with everything it needs: its teacher's weights, its data stream."""

    def __init__(self, config: SweepConfig, teachers: Teachers, spec: StudentSpec, device):
        if config.student != "euler":
            raise ValueError("the baseline covers the Euler student only")
        self.config, self.spec = config, spec
        name, replicate = teachers.instances[spec.instance]
        self.teacher = [w[:, spec.instance] for w in (teachers.w_in, teachers.b_in, teachers.w_out)]
        self.teacher_head = teachers.head[spec.instance]
        self.temperature = config.run_temperatures[spec.temperature_index]
        self.student = SingleStudent(spec, config.width, config.vocab if config.loss == "kl" else None,
                                     config.seed).to(device)
        self.stream = seeded_generator(config.seed, TRAIN_DATA_STREAM, replicate, device=device)
        self.optimizer = torch.optim.Adam(self.student.parameters(), lr=config.student_lr(spec.depth))
        self.device = device

    def teacher_readout(self, x):
        h = rmsnorm(x)
        for w_in, b_in, w_out in zip(*self.teacher):
            h = h + torch.relu(rmsnorm(h) @ w_in + b_in).square() @ w_out
        return rmsnorm(h)

    def loss(self, x):
        with torch.no_grad():
            target = self.teacher_readout(x)
        readout = self.student(x)
        if self.config.loss == "mse":
            return F.mse_loss(readout, target)
        teacher_log_p = F.log_softmax(target @ self.teacher_head / self.temperature, -1)
        if self.config.loss == "kl":
            logits = self.student.head(readout)
        else:
            logits = readout @ self.teacher_head / self.temperature
        return F.kl_div(F.log_softmax(logits, -1), teacher_log_p, reduction="batchmean", log_target=True)

    def train(self, steps: int) -> None:
        for step in range(steps):
            for group in self.optimizer.param_groups:
                group["lr"] = self.config.student_lr(self.spec.depth) * schedule_multiplier(
                    self.config.schedule, step, self.config.steps)
            x = torch.randn(self.config.batch, self.config.width, generator=self.stream, device=self.device)
            self.optimizer.zero_grad()
            self.loss(x).backward()
            self.optimizer.step()
