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

A compiled step must not compile during the capture: a recompile reads the CUDA generator's state
and autotunes with a `synchronize()`, both illegal while capturing. So the warm-up steps already
run on the graph's input buffers, the very tensors the capture sees (and samples.py lays every
batch out as those buffers are, so a run without graphs compiles the same kernels), and the capture
runs under `fail_on_recompile`: a guard that still fails is one clear error, not a broken graph.
"""

from contextlib import contextmanager

import torch

from .trainer import Trainer

WARMUP_STEPS = 3  # eager steps on a side stream before the capture: compiled code and the allocator settle


class CudaGraph:
    """What a `Stepper` needs of a CUDA graph: warm-up steps on a side stream, one capture of the
    step, its replay and the release of its memory. (performance/replay.py has a CPU stand-in.)"""

    def __init__(self, device: torch.device):
        self.device, self.graph = device, torch.cuda.CUDAGraph()

    @contextmanager
    def warming_up(self):
        """On a side stream, as capture wants its warm-up."""
        current = torch.cuda.current_stream(self.device)
        side = torch.cuda.Stream(self.device)
        side.wait_stream(current)
        with torch.cuda.stream(side):
            yield
        current.wait_stream(side)

    def capture(self, step):
        """Record `step()` (nothing runs until a replay) and return what it returned."""
        with torch.cuda.graph(self.graph):
            return step()

    def replay(self) -> None:
        self.graph.replay()

    def reset(self) -> None:
        self.graph.reset()


class Stepper:
    """What steps a trainer: `stepper(step)` is `trainer.step(step)`, its update replayed from a
    graph after WARMUP_STEPS eager ones where the config asks for graphs and the population is on a
    GPU (or always, with a `graph_kind` given: a CPU stand-in). A replayed step's losses are the
    graph's: read them before the next step."""

    def __init__(self, trainer: Trainer, graph_kind=None):
        self.trainer = trainer
        wanted = trainer.config.cuda_graphs and trainer.population.device.type == "cuda"
        self.graph_kind = graph_kind or (CudaGraph if wanted else None)
        self.captures = self.graph_kind is not None
        self.graph = self.inputs = self.readouts = self.losses = None
        self.warmed = 0
        self.replays = 0  # a check's evidence that the steps it judged came from the graph

    def __call__(self, step: int) -> torch.Tensor:
        if not self.captures:
            return self.trainer.step(step)
        inputs, readouts = self.trainer.batch(step)
        if self.inputs is None:  # the graph's input buffers, contiguous, as the capture will read them
            self.inputs = torch.empty_like(inputs, memory_format=torch.contiguous_format)
            self.readouts = torch.empty_like(readouts, memory_format=torch.contiguous_format)
            self.graph = self.graph_kind(inputs.device)
        self.inputs.copy_(inputs)
        self.readouts.copy_(readouts)
        if self.warmed < WARMUP_STEPS:
            self.warmed += 1
            with self.graph.warming_up():
                return self.trainer.update(self.inputs, self.readouts)
        if self.losses is None:
            self.capture()
        self.graph.replay()
        self.replays += 1
        return self.losses

    def capturing_next(self) -> bool:
        """Whether the next step captures the graph."""
        return self.captures and self.warmed == WARMUP_STEPS and self.losses is None

    def capture(self) -> None:
        """Record one update on the input buffers; a compile it would need raises instead."""
        self.trainer.optimizer.zero_grad()  # the gradients live in the graph's own memory
        with torch.compiler.set_stance("fail_on_recompile"):
            self.losses = self.graph.capture(lambda: self.trainer.update(self.inputs, self.readouts))

    def release(self) -> None:
        """Free the graph's memory (before a rebuild captures the next one)."""
        if self.graph is not None:
            self.graph.reset()
        self.graph = self.inputs = self.readouts = self.losses = None
