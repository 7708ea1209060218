"""Where a step's training samples come from: fresh inputs from one seeded stream per teacher
instance, labelled by the teachers a block of steps at a time (`FreshSamples`, the paper's
protocol), or a pool of inputs labelled once that each step draws from (`TeacherPool`)."""

import time

import torch

from ..models.streams import POOL_STREAM, seeded_generator
from .population import Population, draw_inputs
from .progress import stage

POOL_CHUNK = 8192  # inputs drawn at once when a pool is filled
LABEL_CHUNK = (
    512  # inputs the teachers label at once on a CPU: 2.2× faster than 8192, whose hidden states leave the cache
)
# Samples per teacher labelled at once for training, by device: on a GPU a step is launch-bound, and
# labelling 16 steps of the paper's batch in one pass takes the teachers' 128 layers off 15 of them.
LABEL_SAMPLES = {"cpu": LABEL_CHUNK, "cuda": 16 * 1024}


class TeacherPool:
    """`size` inputs per teacher instance and the teachers' read-outs of them, computed once;
    each step draws its batch from them (with replacement) instead of running the teachers.
    With `pool_refresh`, generation g of the pool (from step g·pool_refresh on) holds fresh inputs
    of its own seeded stream, so a resumed job relabels exactly the pool it had."""

    def __init__(self, population: Population, size: int, generation: int = 0):
        config, device = population.config, population.device
        self.generation = generation
        keys = () if generation == 0 else (generation,)  # generation 0: the stream of pools that never refresh
        generators = [
            seeded_generator(config.seed, POOL_STREAM, r, *keys, device=device)
            for _, r in population.teachers.instances
        ]
        self.inputs = torch.cat(
            [
                draw_inputs(generators, min(POOL_CHUNK, size - start), config.width, device)
                for start in range(0, size, POOL_CHUNK)
            ],
            dim=1,
        )
        chunks = stage(f"labelling a teacher pool of {size} samples", self.inputs.split(LABEL_CHUNK, dim=1))
        self.readouts = torch.cat([population.teacher_readouts(x) for x in chunks], 1)

    def draw(self, generators, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """A batch of (inputs, read-outs) per teacher instance."""
        picks = torch.stack(
            [torch.randint(self.inputs.shape[1], (batch,), generator=g, device=g.device) for g in generators]
        )
        rows = torch.arange(len(generators), device=picks.device).view(-1, 1)
        return self.inputs[rows, picks], self.readouts[rows, picks]

    def keep(self, instances: list[int]) -> "TeacherPool":
        self.inputs, self.readouts = self.inputs[instances], self.readouts[instances]
        return self


class FreshSamples:
    """Fresh teacher samples, each used once, from one stream per teacher instance. The inputs of
    the next `steps_ahead` steps (a block) are drawn exactly as one step at a time would draw them
    (the same numbers) and the teachers label them at once, so their 128 layers run once per
    LABEL_SAMPLES of the device, not once per step: at batch 16 on a CPU that was most of a step's
    time, and on a GPU most of its launches. The block is kept steps first, so each step's batch is
    one contiguous tensor, laid out as a step drawn alone would be: a compiled step then sees one
    layout whether or not a CUDA graph copies the batch into its buffers (cuda_graphs.py). The block's
    length is the run's: a checkpoint keeps it, so a run resumed on a device of the same type labels
    the same blocks (the streams are that device type's generators: engine.py refuses another)."""

    def __init__(self, population: Population, streams: list[torch.Generator], batch: int):
        self.population, self.streams, self.batch = population, streams, batch
        samples = LABEL_SAMPLES.get(population.device.type, LABEL_CHUNK)
        self.steps_ahead = max(1, min(samples // batch, population.config.steps))  # a short run labels no more
        self.block_start = [g.get_state() for g in streams]  # where the block being used began
        self.inputs = self.readouts = None
        self.used = 0  # steps of the block used so far
        self.labelling_seconds = 0.0  # for the run's time split (`TimeSplit`)

    def draw(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The next batch of (inputs, read-outs) per teacher instance."""
        if self.inputs is None:  # label the block that begins where the streams are (at block_start)
            population, width = self.population, self.population.config.width
            began = time.perf_counter()
            inputs = torch.cat(
                [draw_inputs(self.streams, self.batch, width, population.device) for _ in range(self.steps_ahead)],
                dim=1,
            )
            with population.precision():
                readouts = population.teacher_readouts(inputs)
            self.inputs, self.readouts = (self.steps_first(samples) for samples in (inputs, readouts))
            self.labelling_seconds += time.perf_counter() - began
        batch = self.inputs[self.used], self.readouts[self.used]
        self.used += 1
        if self.used == self.steps_ahead:  # spent: the next block begins where the streams are now
            self.inputs = self.readouts = None
            self.used, self.block_start = 0, [g.get_state() for g in self.streams]
        return batch

    def steps_first(self, samples: torch.Tensor) -> torch.Tensor:
        """A block's (instances, steps · batch, …) samples as (steps, instances, batch, …), contiguous."""
        return samples.unflatten(1, (self.steps_ahead, self.batch)).transpose(0, 1).contiguous()

    def state(self) -> dict:
        return {"data_streams": self.block_start, "block_steps_used": self.used, "block_steps": self.steps_ahead}

    def load_state(self, state: dict) -> None:
        """Continue from `state()`: the block is drawn and labelled again from where it began, as
        long as it was (a checkpoint written before blocks has the streams after its step, and no
        block begun; one written before their length was kept, this device's)."""
        for generator, saved in zip(self.streams, state["data_streams"]):
            generator.set_state(saved)
        self.inputs, self.used = None, state.get("block_steps_used", 0)
        self.steps_ahead = state.get("block_steps", self.steps_ahead)

    def keep(self, population: Population, instances: list[int]) -> "FreshSamples":
        """These samples for `population`, which learns from the teacher instances at `instances` here."""
        self.population, self.streams = population, [self.streams[i] for i in instances]
        self.block_start = [self.block_start[i] for i in instances]
        if self.inputs is not None:
            self.inputs, self.readouts = self.inputs[:, instances], self.readouts[:, instances]
        return self
