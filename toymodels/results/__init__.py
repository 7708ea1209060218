"""What a run leaves and what it means: the run folder on disk (`storage`, `provenance`), a
finished run's trained students for the trained start (`trained_runs`), α_ℓ with its interval,
certificates and gaps (`fitting`: numbers in, numbers out) and the tables and documents of the
fits (`report`).

May import: the ground floor (`toymodels.config`, `errors`, `vocabulary`), `toymodels.models` (a
run's students rebuilt) and `toymodels.training` (the protocol a run folder resolves). Nothing
here trains.
"""

from . import trained_runs  # the trained start reads run folders through it, wherever a run is read or trained

__all__ = ["trained_runs"]
