"""The public API: one export table (toymodels/api.py), what it hands out, and the stubs that show it
to editors and type checkers."""

from pathlib import Path

import pytest

import toymodels
import toymodels.api as api

PACKAGE = Path(toymodels.__file__).resolve().parent


@pytest.mark.parametrize("module, stub", [("toymodels.api", "api.pyi"), ("toymodels", "__init__.pyi")])
def test_the_stubs_are_what_the_export_table_gives(module, stub):
    assert (PACKAGE / stub).read_text() == api.stub_text(module), (
        f"toymodels/{stub} is stale: write it again with "
        f"`python -c \"import toymodels.api as a; open('toymodels/{stub}', 'w').write(a.stub_text('{module}'))\"`"
    )


def test_every_exported_name_is_what_its_module_defines_and_the_package_lists_it():
    import importlib

    for name, module in api._EXPORTS.items():
        assert getattr(api, name) is getattr(importlib.import_module(f"toymodels.{module}"), name)
        assert getattr(toymodels, name) is getattr(api, name)
    assert set(dir(toymodels)) == set(api._EXPORTS) | {"__version__"} and set(dir(api)) == set(api._EXPORTS)
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        toymodels.nothing  # noqa: B018 - the attribute access is the test
