"""A student architecture of your own, outside the package: train it as

    toymodels run --teacher tied --loss mse --student examples/custom_student.py:heun

A student is a block function, h → h', batched over a leading model axis, registered with
`@register_student("name", **options)`; the options say how it is parametrised, what it
costs and the order of the integrator it is (the fields of `toymodels.Architecture`).
"""

from toymodels import register_student
from toymodels.models.blocks import update


@register_student("heun", mlp_calls=2, order=2)  # one MLP's weights, two evaluations of it per block; second order
def heun_block(h, w_in, b_in, w_out, norm_scale=1.0, branch_scale=None):
    """Heun's method with one MLP per block: the same vector field evaluated twice."""
    def field(x):  # the MLP's update from x: the field × the step
        return update(x, w_in, b_in, w_out, 0, norm_scale, branch_scale)

    k1 = field(h)
    return h + (k1 + field(h + k1)) / 2
