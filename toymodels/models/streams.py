"""Where every random draw comes from: a generator per purpose, keyed by what it serves.

Each kind of draw (teacher weights, training data, the test set, a head, a student's first
weights, a teacher pool) has a stream of its own, and within it a draw is keyed by what it is
for (a teacher's replicate, a student's replicate, temperature and depth), never by its place in
a list: a teacher's numbers do not depend on its place in `--teacher`, and a student trained alone
sees the numbers it sees inside a population.
"""

import numpy as np
import torch

WEIGHTS_STREAM, TRAIN_DATA_STREAM, TEST_DATA_STREAM, HEAD_STREAM, STUDENT_STREAM, POOL_STREAM = range(6)


def seeded_generator(*keys: int, device="cpu") -> torch.Generator:
    """A generator whose stream is a pure function of `keys`. Every random draw of the suite
    (teacher weights, student inits, data) is named by such a key, so a student trained alone
    and the same student trained inside a population see identical numbers."""
    seed = int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1, np.uint64)[0] >> 1)
    return torch.Generator(device=device).manual_seed(seed)
