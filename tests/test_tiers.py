"""The test tiers are enforced: an untiered module, or a unit module that starts real parts, fails collection.
Parallel workers: each module runs whole on one worker (the engine tier and the dockerd modules share one), the
longest groups are handed out first, and each worker has a loopback net of its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from .sshd_hosts import worker_net

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.unit

# The hook under test, loaded into the throwaway test tree (not the rest of tests/conftest.py's plugins).
CONFTEST = """
import pytest
from tests.conftest import (  # noqa: F401
    pytest_collection_modifyitems, pytest_configure, pytest_make_collect_report, pytest_xdist_make_scheduler,
)

@pytest.fixture
def ssh_fleet():
    yield None

@pytest.fixture
def dockerd():
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


def test_modules_are_grouped_and_ordered_for_workers(tree):
    tree.makepyfile(
        test_a_unit="import pytest\npytestmark = pytest.mark.unit\ndef test_u():\n    pass\n",
        test_b_fleet="import pytest\npytestmark = pytest.mark.integration\ndef test_f(ssh_fleet):\n    pass\n",
        test_c_docker=(
            "import pytest\npytestmark = pytest.mark.integration\n"
            "def test_plain():\n    pass\ndef test_d(dockerd):\n    pass\n"
        ),
        test_d_engine="import pytest\npytestmark = pytest.mark.engine\ndef test_e():\n    pass\n",
        test_e_docker="import pytest\npytestmark = pytest.mark.integration\ndef test_d(dockerd):\n    pass\n",
    )
    [finished] = tree.inline_run("--collect-only").getcalls("pytest_collection_finish")
    groups = [(item.name, item.get_closest_marker("xdist_group").args[0]) for item in finished.session.items]
    # longest group first (untimed: engine 900 s, integration 120 s, unit 5 s; ties in collection order); the dockerd
    # modules in DOCKER_GROUPS groups balanced by seconds, each module whole (one daemon per group)
    assert groups == [
        ("test_e", "engine"),
        ("test_f", "test_b_fleet.py"),
        ("test_plain", "docker-1"),
        ("test_d", "docker-1"),
        ("test_d", "docker-2"),
        ("test_u", "test_a_unit.py"),
    ]


def test_workers_run_each_group_whole(tree, monkeypatch):
    """Real workers (pytest-xdist): a module's tests on one worker, each dockerd group's modules too."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent.parent))  # the tree imports tests.conftest
    modules = {f"test_{n}": "import pytest\npytestmark = pytest.mark.integration\n" for n in "abcdefg"}
    for name in modules:
        fixture = "dockerd" if name in ("test_b", "test_e", "test_g") else "ssh_fleet"
        modules[name] += "".join(f"def test_{i}({fixture}):\n    pass\n" for i in range(3))
    tree.makepyfile(**modules)
    result = tree.runpytest_subprocess("-n", "3", "--dist", "loadscope", "-v")
    result.assert_outcomes(passed=21)
    workers: dict[str, set[str]] = {}
    for line in result.outlines:
        if line.startswith("[gw") and " PASSED " in line:
            workers.setdefault(line.split("::")[0].split()[-1], set()).add(line.split("]")[0])
    assert all(len(ran_on) == 1 for ran_on in workers.values()), workers
    # three untimed dockerd modules, longest (then by name) into the lighter group, a tie to the first: b and g in
    # docker-1, e in docker-2
    assert workers["test_b.py"] == workers["test_g.py"]


def test_each_worker_has_a_net_of_its_own():
    assert worker_net("127.0.42", "") == "127.0.42"  # no workers: the net as given
    assert [worker_net("127.0.42", f"gw{n}") for n in range(3)] == ["127.0.42", "127.0.43", "127.0.44"]
    with pytest.raises(RuntimeError, match="past 255"):
        worker_net("127.0.254", "gw2")
    for bad in ("10.0.0", "127.0.256", "127.0"):
        with pytest.raises(RuntimeError, match="three octets"):
            worker_net(bad, "gw0")
