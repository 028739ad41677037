"""Every docstring example in the package runs."""

import doctest
import importlib
import pkgutil

import pytest

import servopt

MODULES = sorted(
    info.name for info in pkgutil.walk_packages(servopt.__path__, prefix="servopt.")
    if not info.name.endswith("__main__")
)


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
