"""Cutting a sweep into jobs: independent pieces that train, checkpoint and finish on their own.

A job is a block of the sweep's students: some teacher instances × some temperatures × some
depths. Every random draw of a student is keyed by its own (instance, temperature, depth) and
every teacher instance has its own data stream, so a student trains to the same numbers in any
job. Jobs are cut along teacher instances first (each teacher then still runs once per step for
all its students), then depths, then temperatures (`Job.split`), until there are enough of them
to keep `--jobs` workers busy and each one fits in memory (`planning.plan_jobs`).
"""

from dataclasses import dataclass, replace

from ..models.students import StudentSpec
from .protocol import Protocol


@dataclass(frozen=True)
class Job:
    name: str
    instances: tuple[int, ...]  # indices into SweepConfig.teacher_instances
    temperatures: tuple[int, ...]  # indices into the loss's temperatures of the sweep
    depths: tuple[int, ...]
    starts: tuple[str, ...] = ("zero",)  # every student trains from each

    @classmethod
    def whole(cls, protocol: Protocol) -> "Job":
        config = protocol.config
        return cls(
            "all",
            tuple(range(len(config.teacher_instances))),
            tuple(range(len(protocol.temperatures))),
            tuple(config.depths),
            tuple(config.starts),
        )

    def students(self) -> list[StudentSpec]:
        return [
            StudentSpec(i, t, d, start)
            for i in self.instances
            for t in self.temperatures
            for d in self.depths
            for start in self.starts
        ]

    def layers(self) -> int:
        """Student-layers: what the job's compute and memory grow with."""
        return len(self.instances) * len(self.temperatures) * sum(self.depths) * len(self.starts)

    def split(self) -> tuple["Job", "Job"] | None:
        """Two halves: by teacher instance (each teacher still runs once per step for all its
        students), else by depth or by temperature, whichever halves the work more evenly (depths
        deepest first, each to the lighter half); None for a single student."""
        if len(self.instances) > 1:
            half = len(self.instances) // 2
            return replace(self, instances=self.instances[:half]), replace(self, instances=self.instances[half:])
        splits = []
        if len(self.depths) > 1:
            halves = ([], [])
            for depth in sorted(self.depths, reverse=True):
                min(halves, key=sum).append(depth)
            splits.append(tuple(replace(self, depths=tuple(sorted(half))) for half in halves))
        if len(self.temperatures) > 1:
            half = len(self.temperatures) // 2
            splits.append(
                (
                    replace(self, temperatures=self.temperatures[:half]),
                    replace(self, temperatures=self.temperatures[half:]),
                )
            )
        return min(splits, key=lambda pair: max(map(Job.layers, pair)), default=None)

    def describe(self, protocol: Protocol) -> str:
        """`tied r0, T 0.1,1, ℓ 2,4 (4 students)`: which students, in the sweep's own terms."""
        instances = [protocol.config.teacher_instances[i] for i in self.instances]
        teachers = "; ".join(
            f"{name} r{','.join(str(r) for n, r in instances if n == name)}"
            for name in dict.fromkeys(n for n, _ in instances)
        )
        loss, every = protocol.loss, protocol.temperatures
        chosen = [every[t] for t in self.temperatures]
        if not loss.uses_temperature:
            temperatures = ""
        elif len(chosen) > 3:
            everyone = " all" if len(chosen) == len(every) else ""
            temperatures = f"{everyone} {len(chosen)} T from {min(chosen):.3g} to {max(chosen):.3g},"
        else:
            temperatures = " T " + ",".join(f"{t:.3g}" for t in chosen) + ","
        starts = f", from {'/'.join(self.starts)}" if self.starts != ("zero",) else ""
        return (
            f"{teachers},{temperatures} ℓ {','.join(map(str, self.depths))}{starts} ({len(self.students())} students)"
        )

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "instances": self.instances,
            "temperatures": self.temperatures,
            "depths": self.depths,
            "starts": self.starts,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Job":
        """A job of jobs.json (those written before starts existed start from zero)."""
        return cls(
            data["name"],
            *(tuple(data[k]) for k in ("instances", "temperatures", "depths")),
            tuple(data.get("starts", ("zero",))),
        )
