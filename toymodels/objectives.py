"""What a student is trained to match, and the per-student loss.

Each objective turns the teachers' read-out rmsnorm(h_L) into targets once per step (shared by
every student of that teacher), turns a student's final hidden state into its output, and
returns one loss per student, so `losses.sum().backward()` trains the whole population.

  mse            ‖rmsnorm(h_ℓ) − rmsnorm(h_L^teacher)‖² averaged over batch and width (no head, no T)
  kl             KL(teacher ‖ student): teacher logits / T, the student's own head trained from zero
  kl-fixed-head  the same KL, but student and teacher share one fixed head N(0,1)/√d and the
                 student's logits are also divided by T
"""

import torch
import torch.nn.functional as F

from .blocks import rmsnorm
from .errors import ToymodelsError

OBJECTIVES = ("kl", "kl-fixed-head", "mse")


def kl_per_model(student_logits: torch.Tensor, teacher_log_probs: torch.Tensor) -> torch.Tensor:
    """KL(teacher ‖ student) per model, averaged over the batch (PyTorch's `batchmean`)."""
    student_log_probs = F.log_softmax(student_logits, dim=-1)
    pointwise = F.kl_div(student_log_probs, teacher_log_probs, reduction="none", log_target=True)
    return pointwise.sum(-1).mean(-1)


def mse_per_model(student_readout: torch.Tensor, teacher_readout: torch.Tensor) -> torch.Tensor:
    return (student_readout - teacher_readout).square().mean((-2, -1))


class Objective:
    """Targets and losses for one of `OBJECTIVES`, for a population of students.

    `target_index[m]` is the row of the teacher targets that student m learns: its teacher
    instance for MSE, (instance, temperature) for the KL losses.
    """

    def __init__(self, name, temperatures, student_instances, student_temperature_indices, device):
        if name not in OBJECTIVES:
            raise ToymodelsError(f"unknown loss {name!r}; choose from {', '.join(OBJECTIVES)}")
        self.name = name
        self.temperatures = torch.tensor(temperatures, dtype=torch.float32, device=device)
        instances = torch.tensor(student_instances, device=device)
        temperature_index = torch.tensor(student_temperature_indices, device=device)
        self.student_instances = instances
        self.target_index = instances if name == "mse" else instances * len(temperatures) + temperature_index
        self.student_temperatures = self.temperatures[temperature_index].view(-1, 1, 1)

    @property
    def head_trained(self) -> bool:
        return self.name == "kl"

    def teacher_targets(self, teacher_readout: torch.Tensor, teacher_head: torch.Tensor) -> torch.Tensor:
        """(instances, batch, width) → one target row per `target_index` value."""
        if self.name == "mse":
            return teacher_readout
        logits = torch.bmm(teacher_readout, teacher_head).unsqueeze(1) / self.temperatures.view(1, -1, 1, 1)
        return F.log_softmax(logits, dim=-1).flatten(0, 1)

    def losses(self, student_final: torch.Tensor, students, teacher_head: torch.Tensor,
               targets: torch.Tensor) -> torch.Tensor:
        """One loss per student, given the population's final hidden states."""
        readout = rmsnorm(student_final)
        mine = targets[self.target_index]
        if self.name == "mse":
            return mse_per_model(readout, mine)
        if self.head_trained:
            logits = torch.bmm(readout, students.head)
        else:
            logits = torch.bmm(readout, teacher_head[self.student_instances]) / self.student_temperatures
        return kl_per_model(logits, mine)
