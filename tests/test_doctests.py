"""Every docstring example in the package runs."""

import doctest
import importlib
import pkgutil

import pytest

PACKAGES = ["servopt.costmodels", "servopt.calibration", "servopt.search_spaces", "servopt.optimizer", "servopt.results"]


def _modules() -> list[str]:
    names = []
    for package_name in PACKAGES:
        package = importlib.import_module(package_name)
        names.append(package_name)
        names += [info.name for info in pkgutil.walk_packages(package.__path__, prefix=f"{package_name}.")]
    return sorted(name for name in names if not name.endswith("__main__"))


MODULES = _modules()


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
