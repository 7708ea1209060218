"""What a run's provenance records about the software that ran it."""

import json

import numpy as np
import pandas as pd
import scipy
import torch

from toymodels.results.provenance import Session, environment, package_version


def test_the_environment_names_scipy_and_pandas_beside_torch_and_numpy():
    record = environment(torch.device("cpu"))
    assert record["scipy"] == scipy.__version__ and record["pandas"] == pd.__version__
    assert record["numpy"] == np.__version__ and record["torch"] == torch.__version__


def test_a_package_that_is_not_installed_reads_as_none_not_an_error():
    assert package_version("toymodels-no-such-distribution") is None


def test_a_saved_session_keeps_the_versions_in_strict_json(tmp_path):
    saved = []
    session = Session(torch.device("cpu"), saved.append)
    with session.stage("train"):
        pass
    record = json.loads(json.dumps(saved[-1], allow_nan=False))
    assert record["scipy"] == scipy.__version__ and record["pandas"] == pd.__version__
    assert set(record["stages"]) == {"train"}


def test_a_run_made_before_students_streams_were_keyed_by_what_they_are_names_whom_reproduce_redraws():
    from toymodels import resolve_config
    from toymodels.models.students import STREAM_KEYS
    from toymodels.results.provenance import redrawn_students
    from toymodels.training.protocol import Protocol

    def redrawn(provenance=None, **changes):
        return redrawn_students(Protocol.of(resolve_config("quick", **changes)), provenance or {})

    two_teachers = dict(teachers=["independent", "tied"], loss="mse", starts=["zero", "discretised"])
    assert redrawn(**two_teachers) == ["of every teacher after the first (tied)"]
    assert redrawn(teachers=["tied"], loss="kl", starts=["zero"]) == ["at every temperature"]
    assert redrawn(teachers=["tied"], loss="mse", starts=["zero"]) == []  # keyed as 0 then and now
    assert redrawn(teachers=["independent", "tied"], loss="kl", starts=["discretised"]) == []  # draws nothing
    today = {"sessions": [environment(torch.device("cpu"))]}
    assert today["sessions"][0]["stream_keys"] == STREAM_KEYS
    assert redrawn(today, **two_teachers) == []
