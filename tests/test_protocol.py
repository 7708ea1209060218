"""A config's names are resolved once, into a Protocol, and that object goes down the run path."""

import pickle

import pytest
from click.testing import CliRunner

from toymodels import ToymodelsError, run_sweep
from toymodels.cli import main
from toymodels.registry import Registry
from toymodels.training.engine import train
from toymodels.training.population import Population
from toymodels.training.protocol import Protocol


def test_below_the_protocol_no_name_is_looked_up_again(tiny_config, monkeypatch):
    protocol = Protocol.of(
        tiny_config.replace(starts=("zero", "discretised"), converge=True, check_every=10, patience=1, decays=0)
    )
    lookups = []
    monkeypatch.setattr(Registry, "lookup", lambda registry, name: lookups.append((registry.kind, name)))
    trained = train(protocol)  # training, students leaving, references, the teachers and starts they need
    assert lookups == [] and len(trained.history)
    population = Population(protocol, "cpu")
    assert population.protocol is protocol and population.students.architecture is protocol.architecture


def test_fit_resolves_a_runs_protocol_once(tiny_config, tmp_path, monkeypatch):
    run_sweep(tiny_config, tmp_path / "run", progress=False)
    resolved = []
    original = Protocol.of.__func__
    monkeypatch.setattr(
        Protocol, "of", classmethod(lambda cls, config: resolved.append(config) or original(cls, config))
    )
    for arguments in (["fit", str(tmp_path / "run")], ["fit", "--json", str(tmp_path / "run")]):
        resolved.clear()
        assert CliRunner().invoke(main, arguments).exit_code == 0
        assert len(resolved) == 1  # the folder's protocol: the table, the fit and the partial-run check share it


def test_a_protocol_travels_to_a_worker_as_its_config_and_is_resolved_there(tiny_config):
    protocol = Protocol.of(tiny_config.replace(teachers=("tied", "correlated(rho=0.5)")))
    there = pickle.loads(pickle.dumps(protocol))
    assert there is not protocol and there.config == protocol.config
    assert list(there.teachers) == ["tied", "correlated(rho=0.5)"] and there.loss is protocol.loss


def test_a_changed_value_keeps_the_components_and_a_changed_name_resolves_anew(tiny_config):
    protocol = Protocol.of(tiny_config)
    cheaper = protocol.replace(batch=8, device="cpu")
    assert cheaper.config.batch == 8 and cheaper.architecture is protocol.architecture
    assert cheaper.teachers is protocol.teachers
    other = protocol.replace(student="rk2")
    assert other.architecture.stages == 2
    assert Protocol.of(protocol) is protocol  # a protocol passes through as it is


@pytest.mark.parametrize(
    "field, name, message",
    [
        ("teachers", ("nope",), "unknown teacher 'nope'"),
        ("student", "nope", "unknown student 'nope'"),
        ("loss", "nope", "unknown loss 'nope'"),
        ("schedule", "nope", "unknown schedule 'nope'"),
        ("starts", ("zero", "nope"), "unknown start 'nope'"),
    ],
)
def test_every_name_of_a_config_fails_where_it_is_resolved(tiny_config, field, name, message):
    with pytest.raises(ToymodelsError, match=message):
        Protocol.of(tiny_config.replace(**{field: name}))
