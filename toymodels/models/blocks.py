"""The residual block shared by teachers and students, batched over a leading model axis.

Weights of many networks are stacked on dimension 0, so one `torch.baddbmm` call runs one
layer of all of them: `h` is (models, batch, width), `w_in` (models, width, 4·width),
`b_in` (models, 1, 4·width), `w_out` (models, 4·width, width). An integrator (integrators.py)
sees a layer only as its field, `layer_field`: the MLP branch as a function of h.
"""

from typing import Callable

import torch
import torch.nn.functional as F


def rmsnorm(h: torch.Tensor) -> torch.Tensor:
    """RMS normalisation over the last axis, no learnable gain (the protocol has none anywhere)."""
    return F.rms_norm(h, (h.shape[-1],))


class SquaredReLU(torch.autograd.Function):
    """relu(u)², saving only relu(u) for a one-pass backward (2·relu(u)·grad): on the CPU these
    element-wise passes over (models, batch, 4d) tensors cost as much as the matmuls."""

    @staticmethod
    def forward(ctx, u):
        r = torch.relu(u)
        ctx.save_for_backward(r)
        return r * r

    @staticmethod
    def backward(ctx, grad):
        (r,) = ctx.saved_tensors
        return torch.mul(grad, r).mul_(2)


def mlp(u: torch.Tensor, w_in: torch.Tensor, b_in: torch.Tensor, w_out: torch.Tensor) -> torch.Tensor:
    """Linear(d→4d, bias) → ReLU(·)² → Linear(4d→d, no bias), for a stack of models."""
    return torch.bmm(SquaredReLU.apply(torch.baddbmm(b_in, u, w_in)), w_out)


def branch(u: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """An MLP's output × the depth parametrisation's branch scale, if it has one."""
    return u if scale is None else u * scale


def update(h, w_in, b_in, w_out, stage=0, norm_scale=1.0, branch_scale=None):
    """One residual update: stage `stage`'s MLP on rmsnorm(h), with the architecture's scales on
    the norm (LayerNorm Scaling's) and on the branch."""
    u = rmsnorm(h)
    if norm_scale != 1.0:  # × 1 would cost a pass over the stream for nothing
        u = u * norm_scale
    return branch(mlp(u, w_in[stage], b_in[stage], w_out[stage]), branch_scale)


Field = Callable[..., torch.Tensor]  # field(h, stage=0) -> the layer's MLP branch at h, scales applied


def layer_field(w_in, b_in, w_out, norm_scale=1.0, branch_scale=None) -> Field:
    """One layer as the field an integrator steps: `field(h, stage)` is `update` with stage
    `stage`'s weights (stacked as (stages, models, ...)) and the layer's scales, so a step never
    handles weights."""

    def field(h: torch.Tensor, stage: int = 0) -> torch.Tensor:
        return update(h, w_in, b_in, w_out, stage, norm_scale, branch_scale)

    return field


def euler_block(h: torch.Tensor, field: Field) -> torch.Tensor:
    """h + MLP(rmsnorm(h)): the residual block of every teacher and of the paper's student."""
    return h + field(h)


def mlp_weight_count(width: int) -> int:
    """Weights of one MLP: d×4d in with a bias, 4d×d out."""
    return 2 * 4 * width**2 + 4 * width


def mlp_matmul_flops(width: int) -> int:
    """Matmul FLOPs of one MLP's forward pass, per sample: two d×4d products, 2 FLOPs per multiply-add."""
    return 2 * 2 * width * 4 * width
