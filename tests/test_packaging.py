"""The package as a tool: the wheel's file list covers every package, the CLI imports only the command that runs
(and --help none), a missing extra is one line naming it (exit 2), and the controller imports nothing Linux-only."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from agent import cli, paths
from agent.commands import COMMANDS

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parent.parent
# Where code runs on the controller (hostside and sim run on the hosts, or as the simulated host, and may be Linux-only).
CONTROLLER = ["agent/*.py", "agent/commands", "agent/planning", "agent/running", "agent/judging", "agent/reporting",
              "agent/results", "agent/store"]  # fmt: skip


def controller_files() -> dict[str, Path]:
    """Module name -> its file, for every module of the controller."""
    found = {}
    for pattern in CONTROLLER:
        files = REPO.glob(pattern) if pattern.endswith(".py") else (REPO / pattern).rglob("*.py")
        for path in files:
            parts = path.relative_to(REPO).with_suffix("").parts
            if parts[:3] == ("agent", "store", "migrations"):  # alembic's scripts: alembic runs them, in its context
                continue
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return dict(sorted(found.items()))


def controller_modules() -> list[str]:
    return list(controller_files())


def test_the_wheel_lists_every_package_of_agent():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "agent").rglob("__init__.py")}
    listed = set(config["packages"])
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
    assert config["package-dir"]["agent.data"] == "."
    # agent.data's folder is the root: a module there would ship as agent/data/NAME.py (move it under agent/ or tests/)
    assert sorted(p.name for p in REPO.glob("*.py")) == []
    for pattern in config["package-data"]["agent.data"]:  # each pattern still names files
        assert list(REPO.glob(pattern)), pattern


def test_paths_resolve_inside_the_package_or_its_checkout():
    assert Path(sys.modules["agent"].__file__).parent == paths.AGENT
    for path in (
        paths.PLAYBOOKS / "cell.yml",
        paths.ANSIBLE_CFG,
        paths.DEFAULT_INVENTORY,
        paths.EXAMPLES / "quick.toml",
    ):
        assert path.is_file(), path
    # ansible.cfg names library and module_utils relative to itself: the same layout in a checkout and a wheel
    assert (paths.ANSIBLE_CFG.parent / "playbooks" / "module_utils" / "spark_hostside" / "contracts.py").is_file()


def test_every_command_is_listed_with_the_help_its_module_registers():
    modules = {p.stem for p in (REPO / "agent" / "commands").glob("*.py")} - {"__init__", "flags"}
    assert modules == {module for module, _ in COMMANDS.values()}
    parser = cli.build_parser()  # every command in full
    sub = next(a for a in parser._actions if isinstance(a, __import__("argparse")._SubParsersAction))
    registered = {a.dest: a.help for a in sub._choices_actions}
    assert registered == {name: line for name, (_, line) in COMMANDS.items()}


def run_python(code: str, *args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_help_and_version_import_no_command_and_no_heavy_library():
    code = """
        import sys
        from agent import cli
        try:
            cli.main(sys.argv[1:])
        except SystemExit:
            pass
        heavy = {"ansible", "ansible_runner", "sqlalchemy", "alembic", "matplotlib", "structlog", "rich", "numpy"}
        loaded = sorted(m for m in sys.modules if m.split(".")[0] in heavy or m.startswith("agent.commands."))
        print("LOADED", loaded)
    """
    for argv in (["--help"], ["--version"]):
        done = run_python(code, *argv)
        assert done.returncode == 0, done.stderr
        assert "LOADED []" in done.stdout, done.stdout
    version = run_python(code, "--version").stdout
    assert "spark-agent " in version and "vLLM versions its rules know: 0." in version
    one = run_python(code, "attest", "--help").stdout  # a command's help imports that command only
    assert "agent.commands.attest" in one and "agent.commands.sweep" not in one


def test_a_postgres_store_without_the_extra_says_which_to_install(tmp_path):
    done = run_python(
        """
        import sys
        sys.modules["psycopg"] = None  # as if the [postgres] extra were not installed
        from agent import cli
        sys.exit(cli.main(sys.argv[1:]))
        """,
        "store",
        "info",
        "--store",
        "postgresql+psycopg://spark@127.0.0.1:9/results",
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'spark-agent[postgres]'" in lines[0], done.stderr


def test_a_multinode_simulated_sweep_without_ray_says_which_extra(tmp_path):
    spec = (REPO / "tests" / "test_multinode_plan.py").read_text()
    template = ast.literal_eval(spec.split("SPEC = ", 1)[1].split('\n"""\n', 1)[0] + '\n"""')
    (tmp_path / "mn.toml").write_text(template.format(digest="ab" * 32, nodes=2, tp=2, extra=""))
    done = run_python(
        """
        import sys
        sys.modules["ray"] = None  # as if the [multinode] extra were not installed
        from agent import cli
        sys.exit(cli.main(sys.argv[1:]))
        """,
        "sweep",
        "mn.toml",
        "--no-progress",
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "pip install 'spark-agent[multinode]'" in lines[0], done.stderr
    assert not (tmp_path / "results").exists()  # refused before anything ran


DARWIN = """
import importlib, os, sys, select, signal

# macOS, as far as an import can tell: the platform, and the Linux-only calls gone. The standard library then
# takes its macOS branches, which need macOS-only C modules: stand-ins, as a Mac's Python has them.
import types
# Third-party packages ship a macOS build of their own (psutil's _psutil_osx, ...): loaded as on this platform.
THIRD_PARTY = ("psutil", "ansible", "ansible_runner", "structlog", "rich", "matplotlib", "sqlalchemy", "alembic",
               "fabric", "paramiko", "numpy", "yaml", "jinja2", "tomli_w")
for name in THIRD_PARTY:
    importlib.import_module(name)
scproxy = types.ModuleType("_scproxy")
scproxy._get_proxy_settings = lambda: {"exclude_simple": False, "exceptions": []}
scproxy._get_proxies = lambda: {}
sys.modules["_scproxy"] = scproxy
sys.platform = "darwin"
for name in ("sched_getaffinity", "sched_setaffinity", "pidfd_open", "memfd_create", "getxattr", "setxattr",
             "listxattr", "eventfd", "splice", "copy_file_range", "posix_fadvise", "unshare", "setns"):
    if hasattr(os, name):
        delattr(os, name)
for name in ("epoll", "EPOLLIN"):
    if hasattr(select, name):
        delattr(select, name)
if hasattr(signal, "SIGRTMIN"):
    delattr(signal, "SIGRTMIN")

LINUX_ONLY = ("/proc/", "/sys/")


def hook(event, args):
    if event == "open" and isinstance(args[0], str) and args[0].startswith(LINUX_ONLY):
        raise RuntimeError(f"Linux-only file read on the controller: {args[0]}")
    if event == "ctypes.dlsym" and "prctl" in str(args[1]):
        raise RuntimeError("prctl (Linux-only) called on the controller")
    if event == "os.listdir" and str(args[0]).startswith(LINUX_ONLY[0].rstrip("/")):
        raise RuntimeError("/proc listed on the controller")


sys.addaudithook(hook)
failed = []
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {exc!r}")
from agent import cli
cli.build_parser()  # every command's options, defaults included
cli.version_text()
print("FAILED", failed)
"""


def test_the_controller_imports_on_macos():
    """Every controller module imports with sys.platform faked as darwin and Linux-only calls removed; an import
    that reads /proc, /sys or calls prctl fails."""
    modules = controller_modules()
    assert "agent.cli" in modules and "agent.commands.sweep" in modules
    done = run_python(DARWIN, *modules)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "FAILED []" in done.stdout, done.stdout[-3000:]


def test_the_macos_check_catches_linux_only_use(tmp_path):
    (tmp_path / "linux_only.py").write_text("open('/proc/self/stat').read()\n")
    (tmp_path / "pdeathsig.py").write_text("import ctypes\nctypes.CDLL(None).prctl(1, 9)\n")
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(DARWIN), "linux_only", "pdeathsig"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{REPO}"}, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert "linux_only: RuntimeError" in done.stdout and "pdeathsig: RuntimeError" in done.stdout, done.stdout


def test_controller_code_names_no_linux_only_interface():
    """Beyond imports: no function of the controller reads /proc or /sys or calls prctl (psutil inspects
    processes portably). The parent-guard callback runs on the controller too: its prctl sits behind a guard."""
    offenders = []
    for path in controller_files().values():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                text = node.value
                if text.startswith(("/proc/", "/sys/")) or text in ("/proc", "/sys"):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: {text!r}")
            if isinstance(node, ast.Attribute) and node.attr == "prctl":
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}: prctl")
    assert offenders == []
    guard = (paths.PLAYBOOKS / "callback_plugins" / "spark_parent_guard.py").read_text()
    assert "prctl" in guard and 'sys.platform.startswith("linux")' in guard
