"""The training step captured once as a CUDA graph and replayed (`cuda_graphs`, CUDA only).

On a GPU the step is launch-bound: its hundreds of small kernels cost a few microseconds of launch
each for about as much work. A replayed graph launches them all at once. `Trainer.update` is made
to be captured: device work only, the same ops with the same scalar arguments on the same tensors
at every step, its state updated in place, never a host sync (tests/test_graphs.py checks each on
the CPU, with performance/step_trace.py).

Around the graph, between replays, stay what the host decides: drawing and labelling the batch
(a block of steps at a time, copied into the graph's input buffers), the plateau checks, racing,
evaluations and checkpoints. A rebuilt population is a new trainer, so a new capture, after the
old graph's memory is freed; a load happens before a run's first step, so before its capture.
"""

import torch

from .trainer import Trainer

WARMUP_STEPS = 3  # eager steps on a side stream before the capture: compiled code and the allocator settle


class Stepper:
    """What steps a trainer: `stepper(step)` is `trainer.step(step)`, its update replayed from a
    CUDA graph after WARMUP_STEPS eager ones where the config asks for graphs and the population is
    on a GPU. A replayed step's losses are the graph's: read them before the next step."""

    def __init__(self, trainer: Trainer):
        self.trainer = trainer
        self.captures = trainer.config.cuda_graphs and trainer.population.device.type == "cuda"
        self.graph = self.inputs = self.readouts = self.losses = None
        self.warmed = 0

    def __call__(self, step: int) -> torch.Tensor:
        if not self.captures:
            return self.trainer.step(step)
        inputs, readouts = self.trainer.batch(step)
        if self.warmed < WARMUP_STEPS:  # on a side stream, as capture wants its warm-up
            self.warmed += 1
            side = torch.cuda.Stream(inputs.device)
            side.wait_stream(torch.cuda.current_stream(inputs.device))
            with torch.cuda.stream(side):
                losses = self.trainer.update(inputs, readouts)
            torch.cuda.current_stream(inputs.device).wait_stream(side)
            return losses
        if self.graph is None:
            self.capture(inputs, readouts)
        self.inputs.copy_(inputs)
        self.readouts.copy_(readouts)
        self.graph.replay()
        return self.losses

    def capture(self, inputs: torch.Tensor, readouts: torch.Tensor) -> None:
        """Record one update on input buffers of the batch's shape; nothing runs until a replay."""
        self.inputs, self.readouts = torch.empty_like(inputs), torch.empty_like(readouts)
        self.trainer.optimizer.zero_grad()  # the gradients live in the graph's own memory
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.losses = self.trainer.update(self.inputs, self.readouts)

    def release(self) -> None:
        """Free the graph's memory (before a rebuild captures the next one)."""
        if self.graph is not None:
            self.graph.reset()
        self.graph = self.inputs = self.readouts = self.losses = None
