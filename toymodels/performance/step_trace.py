"""What a training step asks of the device, read on any device, the CPU included: every ATen op
it issues, with the shapes and scalar arguments it gets and the storages it reads that the step
did not make (`trace`); how many of them launch a kernel (`launches`) and which make the host
wait (`syncs`).

A CUDA graph captures a step once and replays it, so it holds only if consecutive steps issue the
same ops with the same scalar arguments, read their inputs from the same storages, and never sync.
That is what the CPU can check of a graph (tests/test_graphs.py), and the op counts
benchmarks/graph_check.py reports.
"""

from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

# Ops that only make a new view of a tensor's storage: no kernel is launched for them.
VIEW_OPS = frozenset(
    {
        "view",
        "_unsafe_view",
        "_reshape_alias",
        "reshape",
        "as_strided",
        "alias",
        "detach",
        "t",
        "transpose",
        "permute",
        "expand",
        "select",
        "slice",
        "unsqueeze",
        "squeeze",
        "split",
        "split_with_sizes",
        "unbind",
        "chunk",
        "view_as",
        "narrow",
        "lift_fresh",
        "_to_copy_view",
    }
)
# Ops that return a host value computed on the device, or a shape that depends on the data: the
# host waits for the device.
SYNC_OPS = frozenset(
    {
        "_local_scalar_dense",
        "item",
        "is_nonzero",
        "equal",
        "nonzero",
        "masked_select",
        "unique",
        "_unique2",
        "unique_consecutive",
        "allclose",
        "any_",
        "tolist",
    }
)


@dataclass(frozen=True)
class OpCall:
    name: str  # the ATen op, e.g. "bmm"
    shapes: tuple[tuple[int, ...], ...]  # of its tensor arguments, in order
    scalars: tuple  # its other arguments (numbers, dtypes, flags), in order
    reads: tuple[int, ...]  # the storages of its tensor arguments that the traced call did not make


class _Recorder(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls: list[OpCall] = []
        self.made: set[int] = set()  # storages the traced call allocated

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        arguments = tree_flatten((args, kwargs))[0]
        tensors = [a for a in arguments if isinstance(a, torch.Tensor)]
        storages = [storage_of(t) for t in tensors]
        scalars = tuple(a for a in arguments if not isinstance(a, torch.Tensor))
        self.calls.append(
            OpCall(
                func.overloadpacket.__name__,
                tuple(tuple(t.shape) for t in tensors),
                scalars,
                tuple(s for s in storages if s not in self.made),
            )
        )
        result = func(*args, **kwargs)
        self.made.update(storage_of(t) for t in tree_flatten(result)[0] if isinstance(t, torch.Tensor))
        return result


def storage_of(tensor: torch.Tensor) -> int:
    return tensor.untyped_storage().data_ptr()


def trace(function, *args, **kwargs) -> tuple[list[OpCall], object]:
    """Run `function(*args, **kwargs)` eagerly and return every ATen op it issued (forward,
    backward and updates alike) with what it returned."""
    with _Recorder() as recorder:
        result = function(*args, **kwargs)
    return recorder.calls, result


def launches(calls: list[OpCall]) -> int:
    """How many of `calls` launch a kernel (all but views): an eager step's launches on a GPU."""
    return sum(call.name not in VIEW_OPS for call in calls)


def syncs(calls: list[OpCall]) -> list[str]:
    """The ops among `calls` that make the host wait for the device."""
    return [call.name for call in calls if call.name in SYNC_OPS]


def signature(calls: list[OpCall]) -> list[tuple]:
    """What a graph bakes in: each op with its shapes and scalar arguments."""
    return [(call.name, call.shapes, call.scalars) for call in calls]


def storages_read(calls: list[OpCall]) -> set[int]:
    return {storage for call in calls for storage in call.reads}
