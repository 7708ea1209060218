"""A student architecture of your own, outside the package: train it as

    toymodels run --teacher tied --loss mse --student examples/custom_student.py:heun

A student is a block function (h, field) -> h′, batched over a leading model axis, where
`field(h)` is the layer's MLP branch at h; it is registered with `@register_student("name",
**options)`, whose options say how it is parametrised, what it costs and the order of the
integrator it is (the fields of `toymodels.Architecture`).
"""

from toymodels import register_student


@register_student("heun", mlp_calls=2, order=2)  # one MLP's weights, two evaluations of it per block; second order
def heun_block(h, field):
    """Heun's method with one MLP per block: the same vector field evaluated twice."""
    k1 = field(h)
    return h + (k1 + field(h + k1)) / 2
