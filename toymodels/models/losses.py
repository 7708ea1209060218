"""What a student is trained to match: one `Loss` object per loss, in the `LOSSES` registry.

A loss owns everything that differs between losses: whether it has temperatures, the teacher's
head, the student's head, the width of what is compared, the teachers' targets (computed once
per step and shared by every student of a teacher), the per-student loss, and its share of the
memory and matmul work. Everything else (engine, jobs, benchmark) asks the loss.

  mse            ‖rmsnorm(h_ℓ) − rmsnorm(h_L^teacher)‖² averaged over batch and width (no head, no T)
  kl             KL(teacher ‖ student): teacher logits / T, the student's own head trained from zero
  kl-fixed-head  the same KL, but student and teacher share one fixed head N(0,1)/√d and the
                 student's logits are also divided by T

A new loss is one subclass of `Loss` with `@register_loss("name")`, in the package or in a file of
your own named on the command line as `--loss file.py:NAME`.
"""

import math

import torch
import torch.nn.functional as F

from ..errors import ToymodelsError
from ..registry import Registry
from .weights import linear_init

LOSSES = Registry("loss")


def register_loss(name: str):
    """Class decorator: `--loss name` trains with the one instance of the class it keeps."""
    return LOSSES.register(name, make=lambda cls: cls())


def loss_named(name: str) -> "Loss":
    """The registered loss `name`, or a user's (`file.py:NAME`, an instance or a subclass of Loss)."""
    loss = LOSSES.lookup(name)
    loss = loss() if isinstance(loss, type) and issubclass(loss, Loss) else loss
    if not isinstance(loss, Loss):
        raise ToymodelsError(f"loss {name!r} is a {type(loss).__name__}, not a toymodels Loss")
    return loss


def kl_targets(teacher_log_probs: torch.Tensor) -> torch.Tensor:
    """What KL students learn from: the teacher's probabilities p with Σ p·log p appended as one
    more column, so that one gather hands both to every student of that teacher row."""
    p = teacher_log_probs.exp()
    return torch.cat([p, (p * teacher_log_probs).sum(-1, keepdim=True)], -1)


def kl_per_model(student_logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """KL(teacher ‖ student) = Σ p·log p − Σ p·log q per model, averaged over the batch (PyTorch's
    `batchmean`), from `kl_targets`: the teacher's side is computed once per teacher row, not once
    per student (on the CPU the per-student exp cost as much as the loss's other work)."""
    p, negative_entropy = targets[..., :-1], targets[..., -1]
    return (negative_entropy - (p * F.log_softmax(student_logits, dim=-1)).sum(-1)).mean(-1)


def mse_per_model(student_readout: torch.Tensor, teacher_readout: torch.Tensor) -> torch.Tensor:
    return (student_readout - teacher_readout).square().mean((-2, -1))


class Loss:
    """A loss for a population of students. Tensors carry a leading model axis: the teachers'
    `readout` is (instances, batch, width), a student's is (students, batch, width)."""

    uses_temperature = True

    def temperatures(self, config) -> tuple[float, ...]:
        """The temperatures students are trained at (none: one NaN keeps the tidy data tidy)."""
        return config.temperatures if self.uses_temperature else (math.nan,)

    def teacher_head(self, config, generator: torch.Generator) -> torch.Tensor | None:
        """A teacher instance's head (width, vocab), or None when the loss has none."""
        return None

    def student_head_width(self, config) -> int | None:
        """Output width of a student's own trained head, or None when students have none."""
        return None

    def output_width(self, config) -> int:
        """Width of what teacher and student are compared on (logits or the read-out)."""
        return config.width

    def matching_student_head(self, teacher_head, temperature: float) -> torch.Tensor | None:
        """The student head that turns the teacher's read-out into its targets (a discretised
        start's), or None when students train no head."""
        return None

    def teacher_targets(self, readout, head, temperatures: torch.Tensor) -> torch.Tensor:
        """The teachers' targets: one row per (instance) or (instance, temperature), see `target_rows`."""
        return readout

    def target_rows(self, instances: torch.Tensor, temperature_indices: torch.Tensor, temperatures: int):
        """Row of `teacher_targets` each student learns."""
        return instances

    def losses(self, readout, targets, student_head, teacher_head, instances, temperatures) -> torch.Tensor:
        """One loss per student: its read-out rmsnorm(h_ℓ), its targets, its own head (or None),
        every teacher's head, each student's teacher instance and temperature (students, 1, 1)."""
        return mse_per_model(readout, targets)

    def head_flops_per_sample(self, config) -> int:
        """Matmul FLOPs of one pass through a head, per sample (0 without a head)."""
        return 0


@register_loss("mse")
class MSE(Loss):
    """The read-outs compared directly: no head, no temperature."""

    uses_temperature = False


@register_loss("kl")
class KLTrainedHead(Loss):
    """KL(teacher ‖ student) on logits; teacher logits / T; the student learns its own head."""

    def teacher_head(self, config, generator):
        return linear_init((config.width, config.vocab), config.width, generator)

    def student_head_width(self, config):
        return config.vocab

    def output_width(self, config):
        return config.vocab

    def matching_student_head(self, teacher_head, temperature):
        return teacher_head / temperature

    def teacher_targets(self, readout, head, temperatures):
        logits = torch.bmm(readout, head).unsqueeze(1) / temperatures.view(1, -1, 1, 1)
        return kl_targets(F.log_softmax(logits, dim=-1).flatten(0, 1))

    def target_rows(self, instances, temperature_indices, temperatures):
        return instances * temperatures + temperature_indices

    def student_logits(self, readout, student_head, teacher_head, instances, temperatures):
        return torch.bmm(readout, student_head)

    def losses(self, readout, targets, student_head, teacher_head, instances, temperatures):
        return kl_per_model(self.student_logits(readout, student_head, teacher_head, instances, temperatures), targets)

    def head_flops_per_sample(self, config):
        return 2 * config.width * config.vocab


@register_loss("kl-fixed-head")
class KLFixedHead(KLTrainedHead):
    """The same KL, through one fixed head N(0,1)/√d that teacher and student share; the
    student's logits are divided by T too."""

    def teacher_head(self, config, generator):
        return torch.randn((config.width, config.vocab), generator=generator) / math.sqrt(config.width)

    def student_head_width(self, config):
        return None

    def matching_student_head(self, teacher_head, temperature):
        return None

    def student_logits(self, readout, student_head, teacher_head, instances, temperatures):
        return torch.bmm(readout, teacher_head[instances]) / temperatures
