"""The test tiers are enforced: an untiered module, or a unit module that starts real parts, fails collection."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.unit

# The hook under test, loaded into the throwaway test tree (not the rest of tests/conftest.py's plugins).
CONFTEST = """
import pytest
from tests.conftest import pytest_make_collect_report  # noqa: F401

@pytest.fixture
def ssh_fleet():
    yield None
"""
MARKERS = "[pytest]\nmarkers =\n    unit: u\n    integration: i\n    engine: e\n"


@pytest.fixture
def tree(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest(CONFTEST)
    pytester.makeini(MARKERS)
    return pytester


BAD_MODULES = {
    "no tier": ("def test_x():\n    pass\n", "*declare exactly one test tier*found none*"),
    "two tiers": (
        "import pytest\npytestmark = [pytest.mark.unit, pytest.mark.engine]\ndef test_x():\n    pass\n",
        "*declare exactly one test tier*found*'unit', 'engine'*",
    ),
    "unit with sshd hosts": (
        "import pytest\npytestmark = pytest.mark.unit\ndef test_x(ssh_fleet):\n    pass\n",
        "*marked unit but test_x starts real parts*",
    ),
}


@pytest.mark.parametrize("case", BAD_MODULES)
def test_a_badly_tiered_module_fails_collection(tree, case):
    source, message = BAD_MODULES[case]
    tree.makepyfile(test_bad=source)
    result = tree.runpytest_inprocess("-q")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines([message])


def test_tiers_select_what_they_say(tree):
    tree.makepyfile(
        test_u="import pytest\npytestmark = pytest.mark.unit\ndef test_u():\n    pass\n",
        test_i="import pytest\npytestmark = pytest.mark.integration\ndef test_i(ssh_fleet):\n    pass\n",
        test_e="import pytest\npytestmark = pytest.mark.engine\ndef test_e():\n    pass\n",
    )
    tree.runpytest_inprocess("-q", "-m", "unit").assert_outcomes(passed=1)
    tree.runpytest_inprocess("-q", "-m", "not engine").assert_outcomes(passed=2)
