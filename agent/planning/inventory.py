"""Load and validate an Ansible inventory with Ansible's own parser (so group_vars and host_vars apply).

Before Ansible reads a file we check it is small UTF-8 text, and read its YAML (group_vars and host_vars too)
through the bounded loader (planning/boundedyaml.py: an alias bomb or deep nesting is one line, never a hang), and
Ansible's own warnings are held back until the inventory proved good: a bad inventory gives one line
naming the file or the host, and nothing else. Host names and the variables that reach a command line or a
path on the host are checked here, before any host is touched.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import math
import re
import socket
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent.errors import UserError
from agent.hostside import raynode, redact
from agent.hostside.docker import MIRROR_RE
from agent.paths import AGENT, DEFAULT_INVENTORY, PLAYBOOKS
from agent.planning import roledefaults, vault
from agent.planning.roledefaults import default_int

RUNTIMES = ("docker", "process")
HOST_SCOPES = ("machine", "workdir")
INVENTORY_MAX_BYTES = 16 * 1024 * 1024
# A host's name is also a folder of the results tree and a --limit pattern: plain only.
HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")
# A DNS name, an IPv4 or IPv6 address; never something ssh could read as an option (a leading -).
ADDRESS = re.compile(r"^[A-Za-z0-9_:\[][A-Za-z0-9._:%\[\]-]{0,252}$")
USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.@-]{0,63}$")
# Paths reach shell commands on the host (ansible's shell and command modules): no shell syntax at all.
SHELL_META = re.compile(r"[\s;&|$`()<>\"'\\*?\[\]{}!#^]|[\x00-\x1f\x7f]")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass
class Host:
    name: str
    vars: dict[str, Any] = field(default_factory=dict)

    @property
    def local(self) -> bool:
        return self.vars.get("ansible_connection") == "local"

    @property
    def address(self) -> tuple[str, int]:
        return str(self.vars.get("ansible_host", self.name)), int(self.vars.get("ansible_port", 22))


def load_inventory(path: str | Path | None, limit: str | None = None, flag: str = "--limit") -> list[Host]:
    """The hosts to work on, with their variables. Raises UserError naming the file, the host or the flag
    (`flag`: how the command spells the option that gave `limit`)."""
    path = Path(path) if path else DEFAULT_INVENTORY
    if not path.exists():
        raise UserError(f"{path}: inventory not found; pass -i INVENTORY (see inventory/example-fleet.yml)")
    for source in files_ansible_reads(path):
        check_text_file(source, vars_file=_is_vars_file(path, source))
    from ansible.utils.display import Display

    Display()  # made before the redirect: it patches the real streams once, and writes to sys.stderr per call
    held = io.StringIO()
    with contextlib.redirect_stdout(held), contextlib.redirect_stderr(held):
        hosts = _load(path, limit, flag)
    sys.stderr.write(held.getvalue())  # ansible's warnings, now that the inventory proved good
    for h in hosts:
        check_host(path, h)
    return hosts


def _load(path: Path, limit: str | None, flag: str) -> list[Host]:
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    vault.install(loader)
    try:
        inv = InventoryManager(loader=loader, sources=[str(path)])
    except Exception as exc:  # ansible raises many kinds; all mean "fix the file"
        raise UserError(f"{path}: cannot parse the inventory: {exc}") from None
    names = [h.name for h in inv.get_hosts()]
    if not names:
        raise UserError(f"{path}: the inventory has no hosts (is it valid YAML/INI for Ansible?)")
    for name in names:
        if not HOST_NAME.match(name):
            raise UserError(
                f"{path}: host {_shown(name)}: not a plain host name (letters, digits, . _ : -, up to 128); "
                "name it plainly and put the address in ansible_host"
            )
    if limit is not None:
        names = _limited(inv, path, names, limit, flag)
    variables = VariableManager(loader=loader, inventory=inv)
    hosts = []
    for name in names:
        raw = variables.get_vars(host=inv.get_host(name))
        for key, value in raw.items():
            vault.remember_vaulted(value, f"{path}: host {name}: {key}")
        host = Host(name, _templated(loader, raw))
        redact.remember_secrets(host.vars)  # e.g. spark_serve_env.HF_TOKEN, ansible_password
        hosts.append(host)
    return hosts


def _limited(inv: Any, path: Path, names: list[str], limit: str, flag: str) -> list[str]:
    wanted = [p.strip() for p in limit.split(",") if p.strip()]
    if not wanted:
        raise UserError(f"{flag} {limit!r}: name hosts or groups (comma-separated); hosts: {', '.join(names)}")
    selected: list[str] = []
    for pattern in wanted:
        try:
            matched = [h.name for h in inv.get_hosts(pattern)]
        except Exception:  # ansible raises several kinds for a bad pattern (a broken ~regex, a bad range)
            raise UserError(f"{flag} {_shown(pattern)}: not a valid host pattern") from None
        if not matched:
            raise UserError(f"{flag} {_shown(pattern)}: no such host or group in {path}; hosts: {', '.join(names)}")
        selected += [m for m in matched if m not in selected]
    return selected


def _shown(text: str) -> str:
    """A name from a file, safe to print on one line."""
    return text if len(text) <= 80 and not _CONTROL.search(text) and text.isprintable() else repr(text[:80])


def files_ansible_reads(path: Path) -> Iterator[Path]:
    """The inventory file(s) and the group_vars/host_vars next to them."""
    root = path if path.is_dir() else path.parent
    if path.is_file():
        yield path
    sources = [root] if path.is_dir() else []
    for folder in sources + [root / "group_vars", root / "host_vars"]:
        if folder.is_dir():
            for n, found in enumerate(sorted(folder.rglob("*"))):
                if n > 10_000:
                    raise UserError(f"{folder}: more than 10000 files; is this the inventory folder?")
                if found.is_file() and not found.name.startswith("."):
                    yield found


def _is_vars_file(inventory: Path, source: Path) -> bool:
    root = inventory if inventory.is_dir() else inventory.parent
    parts = source.relative_to(root).parts
    return len(parts) > 1 and parts[0] in ("group_vars", "host_vars")


def refuse_program(path: Path) -> None:
    """Ansible runs an executable inventory file (and every executable file of an inventory folder): spark-agent
    reads inventories only as text, so one is refused."""
    st = path.stat()
    if not stat.S_ISREG(st.st_mode) or st.st_mode & 0o111:
        raise UserError(
            f"{path}: an executable inventory file (Ansible would run it); spark-agent reads only inventory text: "
            "chmod -x it"
        )


YAML_SUFFIXES = (".yml", ".yaml", ".json")  # read as YAML by Ansible's inventory plugin; vars files also with none


def check_text_file(path: Path, vars_file: bool = False) -> None:
    """Small UTF-8 text and no program, and for YAML (a group_vars/host_vars file: also one without a suffix),
    read by the bounded loader (no alias bomb, no deep nesting) before Ansible ever parses it. Raises
    UserError(file:line)."""
    from agent.planning.spec import read_text_file

    refuse_program(path)
    text = read_text_file(path, "inventory", INVENTORY_MAX_BYTES)
    if path.suffix in YAML_SUFFIXES or (vars_file and not path.suffix):
        _check_yaml(path, text)


def _check_yaml(path: Path, text: str) -> None:
    import yaml

    from agent.planning import boundedyaml

    try:
        boundedyaml.load_all(text, any_tag=True)  # Ansible's tags (!vault, !unsafe) are fine: only the shape counts
    except boundedyaml.YamlBomb as exc:
        raise UserError(f"{path}:{exc.line + 1}: {exc.why}: refused; write plain groups, hosts and vars") from None
    except RecursionError:
        raise UserError(f"{path}: nested too deeply to be an inventory; write plain groups and hosts") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise UserError(f"{path}:{line}: not valid YAML: {problem}") from None


# Our host variables beyond the role's defaults (playbooks/roles/spark/defaults/main.yml): a name one typo away
# from one of these is refused with "did you mean" (a misspelled spark_runtime would otherwise surface much later,
# as a Docker error that never names it).
EXTRA_HOST_VARS = (
    "spark_fleet_address", "spark_watch_webhook", "spark_owner", "spark_file_limit", "spark_hub", "spark_hub_endpoint",
    "spark_hub_token", "spark_hub_download_once", "spark_sim_speed", "spark_sim_startup", "spark_sim_time_scale",
    "spark_sim_vllm_version", "spark_sim_gpu", "spark_ray_token", "spark_mirror_seeder",
)  # fmt: skip


def known_host_vars() -> frozenset[str]:
    """Every host variable spark-agent reads: the role's defaults and EXTRA_HOST_VARS."""
    return roledefaults.names() | frozenset(EXTRA_HOST_VARS)


def _check_names(path: Path, host: Host) -> None:
    known = known_host_vars()
    for name in host.vars:
        if not isinstance(name, str) or not name.startswith("spark_") or name in known:
            continue
        near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.85)
        if near:
            raise UserError(
                f"{path}: host {host.name}: unknown variable {_shown(name)}: did you mean {near[0]}? "
                "(spark-agent reads only the names docs/fleet.md lists)"
            )


def check_host(path: Path, host: Host) -> None:
    """The variables that reach a command line, a path or a port on the host: plain values only."""
    v = host.vars

    def bad(var: str, why: str, show: bool = True) -> UserError:
        value = f"={_shown(str(v[var]))}" if show else ""
        return UserError(f"{path}: host {host.name}: {var}{value} {why}")

    for var in ("ansible_port", "spark_port", "spark_ray_port", "spark_ray_port_base"):
        if var in v and _port(v[var]) is None:
            raise bad(var, "must be a port number from 1 to 65535")
    _check_ray_ports(v, bad)
    for var in ("ansible_host", "spark_bind_host", "spark_fleet_address"):
        if var in v and not (isinstance(v[var], str) and ADDRESS.match(v[var])):
            raise bad(var, "must be a plain host name or IP address")
    mirror = v.get("spark_image_mirror", "")
    if mirror and not (isinstance(mirror, str) and MIRROR_RE.match(mirror)):
        raise bad("spark_image_mirror", "must be a registry address host:port (e.g. 10.0.0.1:5000), or empty")
    if "ansible_user" in v and not (isinstance(v["ansible_user"], str) and USER.match(v["ansible_user"])):
        raise bad("ansible_user", "must be a plain user name")
    for var in ("spark_workdir", "spark_model_cache"):
        if var in v and not _plain_path(v[var]):
            raise bad(var, "must be a path without spaces or shell characters (; & | $ ` ( ) < > quotes * ? ...)")
    if v.get("spark_ray_container_user"):
        try:
            raynode.parse_user(str(v["spark_ray_container_user"]))
        except raynode.RayError as exc:
            raise UserError(f"{path}: host {host.name}: {exc}") from None
    _check_names(path, host)
    runtime = v.get("spark_runtime", "docker")
    if runtime not in RUNTIMES:
        raise bad("spark_runtime", f"must be one of {', '.join(RUNTIMES)}")
    if v.get("spark_host_scope", "machine") not in HOST_SCOPES:
        raise bad("spark_host_scope", f"must be one of {', '.join(HOST_SCOPES)}")
    if "spark_evict" in v and not isinstance(v["spark_evict"], bool):
        raise bad("spark_evict", "must be true or false")
    if "spark_health_timeout" in v and not _number_in(v["spark_health_timeout"], 1, 86_400):
        raise bad("spark_health_timeout", "must be seconds from 1 to 86400")
    for var, example in (("spark_serve_cmd", '["vllm", "serve"]'), ("spark_nvidia_smi", '["nvidia-smi"]')):
        cmd = v.get(var, [])
        if not isinstance(cmd, list):
            raise bad(var, f"must be a list, e.g. {example}, not a string", show=False)
        if len(cmd) > 64 or not all(
            isinstance(a, str) and a and len(a) <= 4096 and not _CONTROL.search(a) for a in cmd
        ):
            raise bad(var, "must list up to 64 non-empty strings, each on one line", show=False)
    for var in ("spark_serve_env", "spark_environment"):
        problem = _env_problem(v.get(var, {}))
        if problem:
            raise bad(var, problem, show=False)  # values may be secrets: never echoed


RAY_PORT_SPAN = 100  # a Ray node's ports: spark_ray_port_base .. +99 (agent/hostside/raynode.argv)


def _check_ray_ports(v: dict[str, Any], bad: Callable[..., UserError]) -> None:
    """Ray refuses a node whose head port lies among its own ports ("the same port is used by multiple
    components"): said here, before any host is touched, not by `ray start` in the middle of a cell."""
    if "spark_ray_port" not in v and "spark_ray_port_base" not in v:
        return
    base = int(_port(v.get("spark_ray_port_base", default_int("spark_ray_port_base"))) or 0)
    head = int(_port(v.get("spark_ray_port", default_int("spark_ray_port"))) or 0)
    if base + RAY_PORT_SPAN - 1 > 65535:
        raise bad("spark_ray_port_base", f"leaves no room for a Ray node's {RAY_PORT_SPAN} ports: use at most "
                  f"{65536 - RAY_PORT_SPAN}")  # fmt: skip
    if base <= head < base + RAY_PORT_SPAN:
        var = "spark_ray_port" if "spark_ray_port" in v else "spark_ray_port_base"
        raise bad(var, f"puts the Ray head's port {head} among the node's ports {base}..{base + RAY_PORT_SPAN - 1} "
                  "(spark_ray_port_base .. +99): move one of them")  # fmt: skip


def _port(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 5:
        value = int(value)
    return value if isinstance(value, int) and 1 <= value <= 65535 else None


def _number_in(value: Any, low: float, high: float) -> bool:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            return False
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and low <= value <= high
    )


def _plain_path(value: Any) -> bool:
    return (
        isinstance(value, str) and 0 < len(value) <= 1024 and not value.startswith("-") and not SHELL_META.search(value)
    )


def _env_problem(env: Any) -> str:
    if not isinstance(env, dict):
        return "must be a mapping of NAME: value"
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME.match(key):
            return f"has the name {_shown(str(key))}; names are letters, digits and _ (not first a digit)"
        if not isinstance(value, (str, int, float)) or isinstance(value, bool):
            return f"{key} must be a string or a number"
        if isinstance(value, str) and (_CONTROL.search(value) or len(value) > 32 * 1024):
            return f"{key} holds a newline or control character, or is over 32 KiB"
    return ""


def _templated(loader: Any, host_vars: dict[str, Any]) -> dict[str, Any]:
    """Host vars as a playbook run sees them (Jinja filled in), so what we record is what runs."""
    from ansible.template import Templar

    magic = {"ansible_playbook_python": sys.executable, "playbook_dir": str(PLAYBOOKS), "spark_agent_dir": str(AGENT)}
    merged = {**dict(host_vars), **magic}
    templar = Templar(loader=loader, variables=merged)
    out = {}
    for key, value in merged.items():
        try:
            out[key] = templar.template(value)
        except Exception:  # a var that only resolves during a play (e.g. from facts): keep it as written
            out[key] = value
    return out


def check_reachable(hosts: list[Host], timeout: float = 3.0) -> None:
    """A TCP connect to each SSH port, before any playbook runs: an unreachable host is a clear error."""
    for h in hosts:
        if h.local:
            continue
        addr, port = h.address
        try:
            with socket.create_connection((addr, port), timeout=timeout):
                pass
        except OSError as exc:
            raise UserError(
                f"host {h.name} ({addr}:{port}) is unreachable: {exc.strerror or exc}; "
                "check ansible_host/ansible_port in the inventory, or leave it out with --limit"
            ) from None
