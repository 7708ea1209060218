"""The classical fourth-order Runge–Kutta rule as a student, outside the package: train it as

    toymodels run --teacher tied --loss mse --student examples/rk4_student.py:rk4

Each block holds four MLPs, one per stage, evaluated where the rule evaluates the field: at the
start of the step, twice at its middle and at its end. `stage_positions` says so, and the
discretised start gives each stage the teacher layer at that point of the flow. Its global error
on a smooth flow falls as ℓ^−4, so it declares `order=4`: a converged student's loss should fall at
least as ℓ^−8, and the verdict judges it against that.
"""

from toymodels import register_student
from toymodels.models.blocks import update


@register_student("rk4", stages=4, order=4, stage_positions=(0, 0.5, 0.5, 1))
def rk4_block(h, w_in, b_in, w_out, norm_scale=1.0, branch_scale=None):
    def stage(s, x):  # the field × the step, from stage s's MLP
        return update(x, w_in, b_in, w_out, s, norm_scale, branch_scale)

    k1 = stage(0, h)
    k2 = stage(1, h + k1 / 2)
    k3 = stage(2, h + k2 / 2)
    k4 = stage(3, h + k3)
    return h + (k1 + 2 * k2 + 2 * k3 + k4) / 6
