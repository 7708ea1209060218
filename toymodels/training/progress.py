"""Long stages of a job that are not training steps (labelling a teacher pool or the test set,
compiling the step) say what they are doing and how far they are, to whoever listens.

The code that does the work wraps its chunks in `stage(description, chunks)`, the way it would
wrap them in a progress bar; the run's jobs (workflows/parallel.py) listen (`listening_to_stages`) and write each
report to the job's folder, where the run's progress bar reads it, whichever process the job runs in.
With nobody listening a stage costs nothing (the API's `train` called on its own).
"""

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Callable, Iterable, Iterator, Sequence, TypeVar

Item = TypeVar("Item")
StageListener = Callable[[str, int, int], None]  # (description, chunks done, chunks in all)

_listener: ContextVar[StageListener | None] = ContextVar("toymodels stage listener", default=None)


def stage(description: str, chunks: Sequence[Item]) -> Iterator[Item]:
    """Yield `chunks`, reporting before each one and once at the end (done == total)."""
    listener, total = _listener.get(), len(chunks)
    for done, chunk in enumerate(chunks):
        if listener:
            listener(description, done, total)
        yield chunk
    if listener:
        listener(description, total, total)


@contextmanager
def single_stage(description: str) -> Iterable[None]:
    """A stage of one chunk: says what it is doing, with no estimate (compiling)."""
    for _ in stage(description, [None]):
        yield


@contextmanager
def listening_to_stages(listener: StageListener) -> Iterable[None]:
    """Every `stage` inside this block reports to `listener`."""
    token = _listener.set(listener)
    try:
        yield
    finally:
        _listener.reset(token)
