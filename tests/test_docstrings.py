"""Every ``>>>`` example in the package's docstrings runs and prints what it says.

The documentation shows these examples (numpydoc ``Examples`` sections and module docstrings);
this runs them with :mod:`doctest` module by module, so an example that rots fails here.
Examples marked ``# doctest: +SKIP`` (long runs, network) are skipped by doctest itself. The
torch modules are skipped when torch is not installed.
"""
import doctest
import importlib
import importlib.util
import pkgutil

import pytest

import riskopt

MODULES = sorted(m.name for m in pkgutil.walk_packages(riskopt.__path__, "riskopt."))
HAS_TORCH = importlib.util.find_spec("torch") is not None


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    if name.startswith("riskopt.torch") and not HAS_TORCH:
        pytest.skip("needs torch")
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE,
                             report=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
