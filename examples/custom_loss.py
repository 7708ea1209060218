"""A loss of your own, outside the package: train with it as

    toymodels run --teacher tied --loss examples/custom_loss.py:cosine

A loss subclasses `toymodels.Loss`, registered with `@register_loss("name")`, and overrides what
differs from the base (MSE on the read-out): here only the per-student loss. Tensors have a
leading model axis (one slice per student), so one call serves the whole population.
"""

import torch.nn.functional as F

from toymodels import Loss, register_loss


@register_loss("cosine")
class Cosine(Loss):
    """1 − cos(student read-out, teacher read-out), averaged over the batch: only the direction counts."""

    uses_temperature = False

    def losses(self, readout, targets, student_head, teacher_head, instances, temperatures):
        return 1 - F.cosine_similarity(readout, targets, dim=-1).mean(-1)
