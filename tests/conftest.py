"""Session fixtures that start real parts: OpenSSH test hosts (more fixture modules are imported below)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml

from . import priority, quiet
from .sshd_hosts import SIM_HOST_VARS, inventory_for, start_fleet, stop_fleet

pytest_plugins = ["tests.fixtures_docker", "tests.engine.fixtures", "tests.fixtures_postgres"]

# Every test module names its tier with `pytestmark`, so `-m unit` and `-m "not engine"` select what they say.
TIERS = ("unit", "integration", "engine")
# Fixtures that start real parts: a test that uses one cannot be a unit test.
HEAVY_FIXTURES = {
    "ssh_fleet": "integration",
    "sim_inventory": "integration",
    "dockerd": "integration",
    "sim_image": "integration",
    "docker_host": "integration",
    "vllm_cpu_python": "engine",
    "tiny_models": "engine",
    "engine_sweep": "engine",
    "postgres": "integration",
}


def module_tier(module: pytest.Module) -> str:
    """The one tier a test module declares; raises a one-line how-to-fix otherwise."""
    marks = getattr(module.obj, "pytestmark", [])
    names = [m.name for m in (marks if isinstance(marks, list) else [marks]) if m.name in TIERS]
    if len(names) != 1:
        raise pytest.UsageError(
            f"{module.path}: declare exactly one test tier, e.g. `pytestmark = pytest.mark.unit` "
            f"(one of {', '.join(TIERS)}; found {names or 'none'})"
        )
    return names[0]


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector):
    """An untiered test module is a collection error, not a test that silently runs in every tier."""
    outcome = yield
    report = outcome.get_result()
    if not isinstance(collector, pytest.Module) or not report.passed or not report.result:
        return
    try:
        tier = module_tier(collector)
        for item in report.result:
            heavy = {HEAVY_FIXTURES[f] for f in getattr(item, "fixturenames", ()) if f in HEAVY_FIXTURES}
            if tier == "unit" and heavy:
                raise pytest.UsageError(f"{collector.path}: marked unit but {item.name} starts real parts ({heavy})")
    except pytest.UsageError as exc:
        report.outcome = "failed"
        report.longrepr = str(exc)


# Parallel workers (pytest-xdist, scripts/pytest.sh): a module runs whole on one worker, so its module fixtures (a
# fleet, a sweep) start once. The engine tier shares one worker (its vLLM servers would otherwise fight over the two
# cores, and its modules share one real sweep). The modules that use the private dockerd form DOCKER_GROUPS groups,
# balanced by their seconds: each group starts one daemon and builds its image once, and no one worker carries them
# all (together they were the longest chain of the run). Work is handed out in collection order, longest group first (by the seconds bench/bench_suite.py
# --save-seconds last recorded), so that no long module starts last and runs alone while the other workers idle.
DOCKER_FIXTURES = {"dockerd", "sim_image", "docker_host"}
MODULE_SECONDS = Path(__file__).with_name("module_seconds.json")
UNKNOWN_SECONDS = {"engine": 900.0, "integration": 120.0, "unit": 5.0}  # a module not timed yet: assume it is long
DOCKER_GROUPS = 2
GROUPS_FILE = "SPARK_TEST_GROUPS"  # env: where the workers note each module's group for the controller's scheduler


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    by_module: dict[pytest.Module, list[pytest.Item]] = {}
    for item in items:
        by_module.setdefault(item.getparent(pytest.Module), []).append(item)
    recorded = json.loads(MODULE_SECONDS.read_text()) if MODULE_SECONDS.is_file() else {}
    groups: dict[str, str] = {}
    group_seconds: dict[str, float] = {}
    seconds = {m: float(recorded.get(m.nodeid, UNKNOWN_SECONDS[module_tier(m)])) for m in by_module}
    docker = [
        m for m, its in by_module.items() if any(DOCKER_FIXTURES & set(getattr(i, "fixturenames", ())) for i in its)
    ]
    for module in sorted(docker, key=lambda m: (-seconds[m], m.nodeid)):  # longest first into the lighter group
        name = min((f"docker-{k}" for k in range(1, DOCKER_GROUPS + 1)), key=lambda g: (group_seconds.get(g, 0.0), g))
        groups[module.nodeid] = name
        group_seconds[name] = group_seconds.get(name, 0.0) + seconds[module]
    for module, module_items in by_module.items():
        if module.nodeid not in groups:
            group = groups[module.nodeid] = "engine" if module_tier(module) == "engine" else module.nodeid
            group_seconds[group] = group_seconds.get(group, 0.0) + seconds[module]
        for item in module_items:
            item.add_marker(pytest.mark.xdist_group(groups[module.nodeid]))
    # stable: collection order within a group and between groups of equal length
    items.sort(key=lambda item: -group_seconds[groups[item.getparent(pytest.Module).nodeid]])
    if os.environ.get(GROUPS_FILE) and os.environ.get("PYTEST_XDIST_WORKER"):
        path = Path(os.environ[GROUPS_FILE])  # every worker collects the same; the last rename wins
        part = path.with_suffix(f".{os.environ['PYTEST_XDIST_WORKER']}")
        part.write_text(json.dumps(groups))
        part.replace(path)


def pytest_configure(config: pytest.Config) -> None:
    priority.lower_controller()  # the controller's side; sshd and dockerd start back at the hosts' (tests/priority.py)
    # xdist registers its group marker; without it (-p no:xdist) the marker is only a label of the plan
    config.addinivalue_line("markers", "xdist_group(name): the worker group a module runs in (tests/conftest.py)")
    if config.getoption("dist", "no") != "no" and not os.environ.get("PYTEST_XDIST_WORKER"):
        folder = Path(tempfile.mkdtemp(prefix="spark-test-groups-"))
        os.environ[GROUPS_FILE] = str(folder / "groups.json")  # the workers, started after this, inherit it
        config.add_cleanup(lambda: shutil.rmtree(folder, ignore_errors=True))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """xdist's own `loadgroup` cannot regroup tests under pytest 9.2 (it rewrites a node id pytest no longer reads):
    this scheduler hands out whole groups, as the workers noted them, in collection order."""
    if config.getoption("dist") not in ("loadscope", "loadfile", "loadgroup"):
        return None  # another mode asked for by name (load, each, worksteal): xdist's own
    from xdist.scheduler import LoadScopeScheduling

    class ModuleGroups(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # read once: every worker has collected (and noted) before scheduling starts
                noted = Path(os.environ.get(GROUPS_FILE, "/nonexistent"))
                self.groups = json.loads(noted.read_text()) if noted.is_file() else {}
            module = nodeid.split("::", 1)[0]
            return self.groups.get(module, module)

    config.option.loadscopereorder = False  # keep the collection's order: longest groups first
    return ModuleGroups(config, log)


@pytest.fixture(scope="session")
def ssh_fleet(tmp_path_factory):
    """Two real sshd test hosts (127.0.0.11 and .12, or $SPARK_TEST_NET.11 and .12), with an inventory file (fleet.inventory)."""
    fleet = start_fleet(tmp_path_factory.mktemp("fleet"), count=2)
    try:
        yield fleet
    finally:
        stop_fleet(fleet)


@pytest.fixture(scope="session")
def sim_inventory(ssh_fleet, tmp_path_factory) -> Path:
    """The SSH test hosts as simulated GB10 Sparks: process runtime, the simulator as the engine."""
    inv = inventory_for(ssh_fleet, SIM_HOST_VARS)
    path = tmp_path_factory.mktemp("inv") / "sim-fleet.yml"
    path.write_text(yaml.safe_dump(inv))
    return path


# The hostile/fault suite: each test marked `attack("what")` tries one attack; it held when the test passed.
_attacks: dict[str, str] = {}  # nodeid -> outcome of its call phase (or of a failed setup)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    with quiet.running_test():  # a test that needs the machine to itself waits for this one (tests/quiet.py)
        yield


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "attack" in report.keywords and (report.when == "call" or report.outcome != "passed"):
        _attacks.setdefault(report.nodeid, report.outcome)


def pytest_terminal_summary(terminalreporter) -> None:
    if _attacks:
        held = sum(outcome == "passed" for outcome in _attacks.values())
        broke = sorted(n for n, o in _attacks.items() if o == "failed")
        terminalreporter.write_line(
            f"hostile suite: {len(_attacks)} attack(s) tried, {held} held"
            + (f"; not held: {', '.join(broke)}" if broke else "")
        )


@pytest.fixture(scope="session", autouse=True)
def own_state_folder(tmp_path_factory):
    """`sweep --detach` notes where each sweep's record is (agent/running/fleetindex.py, under $XDG_STATE_HOME):
    the tests' notes go to a folder of their own, never the user's."""
    patch = pytest.MonkeyPatch()
    patch.setenv("XDG_STATE_HOME", str(tmp_path_factory.mktemp("state")))
    yield
    patch.undo()
