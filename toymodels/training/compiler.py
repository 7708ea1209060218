"""torch.compile for populations that are rebuilt as their students converge."""

import torch
import torch._dynamo.config

# A rebuilt population has new shapes, so its step, its labeller and its Adam update each compile
# one more cache entry of the same Python function. Past dynamo's default of 8 entries a function
# silently runs eager (seen mid-run in the certified cpu sweeps); a run rebuilds at most once per
# student, far below this.
ENTRIES_PER_FUNCTION = 4096


def compile_for_rebuilds(function):
    """`torch.compile(function)`, with room for a long run's rebuilds."""
    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, ENTRIES_PER_FUNCTION)
    config.accumulated_recompile_limit = max(config.accumulated_recompile_limit, ENTRIES_PER_FUNCTION)
    return torch.compile(function)
