"""A student architecture of your own, outside the package: train it as

    toymodels run --teacher tied --loss mse --student examples/custom_student.py:heun

An architecture is a block function, h → h', batched over a leading model axis, plus how it is
parametrised and what it costs (`toymodels.Architecture`).
"""

from toymodels import Architecture
from toymodels.models.blocks import mlp, rmsnorm


def heun_block(h, w_in, b_in, w_out, norm_scale=1.0, branch_scale=None):
    """Heun's method with one MLP per block: the same vector field evaluated twice."""
    def field(x):
        return mlp(rmsnorm(x) * norm_scale, w_in[0], b_in[0], w_out[0])

    k1 = field(h)
    return h + (k1 + field(h + k1)) / 2


heun = Architecture(heun_block, mlp_calls=2)  # one MLP's weights, two evaluations of it per block
