"""The classical fourth-order Runge–Kutta rule as a student, outside the package: train it as

    toymodels run --teacher tied --loss mse --student examples/rk4_student.py:rk4

Each block holds four MLPs, one per stage, evaluated where the rule evaluates the field: at the
start of the step, twice at its middle and at its end. `stage_positions` says so, and the
discretised start gives each stage the teacher layer at that point of the flow. Its global error
on a smooth flow falls as ℓ^−4, so it declares `order=4`: a converged student's loss should fall at
least as ℓ^−8, and the verdict judges it against that.
"""

from toymodels import register_student


@register_student("rk4", stages=4, order=4, stage_positions=(0, 0.5, 0.5, 1))
def rk4_block(h, field):
    k1 = field(h, 0)  # stage s's MLP: the field × the step
    k2 = field(h + k1 / 2, 1)
    k3 = field(h + k2 / 2, 2)
    k4 = field(h + k3, 3)
    return h + (k1 + 2 * k2 + 2 * k3 + k4) / 6
