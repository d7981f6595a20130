"""The docker runtime: pull by digest, run one server container per cell, check what is running.

Standard library only; shells out to the `docker` CLI, so DOCKER_HOST (and the rest of the CLI's
environment) is respected. Every function takes `docker_env`: the CLI's environment, None = ours.
Images are always referred to by digest (`name@sha256:<64 hex>`); tags exist only to be resolved.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import registry
from .errors import HostError

OUR_LABEL = "spark-agent"  # every container we start carries spark-agent=1
CELL_LABEL = "spark-agent.cell"  # ... and spark-agent.cell=<cell id>

# Docker's reference grammar, simplified: optional registry host[:port], then lower-case path components.
_NAME = (
    r"(?:[a-zA-Z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
)
_NAME_RE = re.compile(rf"^{_NAME}$")
_TAG_RE = re.compile(rf"^(?P<name>{_NAME}):(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{{0,127}})$")
_DIGEST_RE = re.compile(r"^sha256:[0-9a-f]{64}$")
MIRROR_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.-]{0,252}(:[0-9]{1,5})?$|^\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?$")


class DockerError(HostError, RuntimeError):
    """A docker CLI call failed; the message carries docker's own error text verbatim."""


class DigestMismatch(DockerError):
    """The running container's image is not the one the cell asked for."""


@dataclass
class ServerContainer:
    """A started server container; `log_follower` is the `docker logs -f` process, if one was asked for."""

    name: str
    container_id: str
    log_follower: subprocess.Popen | None = None


# ---------------------------------------------------------------- references


def parse_ref(ref: str) -> tuple[str, str]:
    """`name@sha256:<64 hex>` -> (name, digest). Anything else (a tag, no digest, bad hex) -> ValueError."""
    ref = ref.strip()
    if "@" not in ref:
        if _TAG_RE.match(ref) or _NAME_RE.match(ref):
            raise ValueError(f"image {ref!r} is not pinned by digest (expected name@sha256:<64 hex>)")
        raise ValueError(f"image {ref!r} is not a valid image reference (expected name@sha256:<64 hex>)")
    name, digest = ref.split("@", 1)
    tagged = _TAG_RE.match(name)
    if tagged:
        bare = tagged.group("name")
        raise ValueError(f"image {ref!r} has both a tag and a digest; keep only the digest: {bare}@{digest}")
    if not _NAME_RE.match(name):
        raise ValueError(
            f"image name {name!r} in {ref!r} is not a valid image name (lower-case, e.g. nvcr.io/nvidia/vllm)"
        )
    if not _DIGEST_RE.match(digest):
        raise ValueError(f"digest {digest!r} in {ref!r} is not sha256:<64 lower-case hex>")
    return name, digest


def is_tag(ref: str) -> bool:
    """`name[:tag]` as docker pull accepts it (no digest)."""
    return bool(_TAG_RE.match(ref) or _NAME_RE.match(ref))


def is_pinned(ref: str) -> bool:
    """Exactly `name@sha256:<64 hex>`: nothing around it, no tag, no newline."""
    name, at, digest = ref.partition("@")
    return bool(at) and _NAME_RE.fullmatch(name) is not None and _DIGEST_RE.fullmatch(digest) is not None


def same_repository(a: str, b: str) -> bool:
    """Do two references (tag, digest or bare name) name one repository (Docker Hub's short names included)?"""
    return _repo_name(a) == _repo_name(b)


def _repo_name(ref: str) -> str:
    """`name[:tag][@digest]` -> name, normalised the way docker shortens Docker Hub names."""
    name = ref.split("@", 1)[0]
    match = _TAG_RE.match(name)
    name = match.group("name") if match else name
    for prefix in ("docker.io/library/", "docker.io/", "index.docker.io/library/", "index.docker.io/"):
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name.removeprefix("library/")


# ---------------------------------------------------------------- the CLI


NOT_INSTALLED = (
    "docker: command not found on this host (install Docker and the NVIDIA container toolkit, "
    'or use runtime = "process")'
)


def _cli(args: list[str], docker_env: dict[str, str] | None, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run `docker ARGS` to completion; a host without the CLI -> DockerError(NOT_INSTALLED)."""
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    try:
        return subprocess.run(["docker", *args], env=docker_env, text=True, **kwargs)
    except FileNotFoundError:
        raise DockerError(NOT_INSTALLED) from None


def _docker(args: list[str], docker_env: dict | None = None) -> str:
    """Run `docker ARGS`; return stdout. Failure -> DockerError with docker's stderr verbatim."""
    proc = _cli(args, docker_env, capture_output=True)
    if proc.returncode != 0:
        raise DockerError(proc.stderr.strip() or f"docker {args[0]} exited with {proc.returncode}")
    return proc.stdout


def image_present(ref: str, docker_env: dict | None = None) -> bool:
    """Is `ref` (by digest or tag) in the local image store?"""
    try:
        _docker(["image", "inspect", "--format", "{{.Id}}", ref], docker_env)
    except DockerError:
        return False
    return True


def pull(ref: str, docker_env: dict | None = None, dry_run: bool = False, mirror: str = "") -> bool:
    """Make sure `name@sha256:…` is present; pull only if missing, from `mirror` (a registry host:port) when one is
    given. The digest is the image: the same digest pulled through a mirror counts as present. Returns changed."""
    _, digest = parse_ref(ref)
    if local_ref(ref, docker_env):
        return False
    if dry_run:
        return True
    if not mirror:
        _docker(["pull", "--quiet", ref], docker_env)
        return True
    try:
        _docker(["pull", "--quiet", mirror_ref(ref, mirror)], docker_env)
    except DockerError as exc:
        raise DockerError(
            f"the mirror {mirror} does not serve {digest} ({_first_line(str(exc))}); seed it first "
            "(playbooks/provision.yml does, from one host) or make it a pull-through cache of the image's registry"
        ) from None
    return True


def _first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0][:300]


def mirror_ref(ref: str, mirror: str) -> str:
    """The same image by digest on a mirror registry: nvcr.io/nvidia/vllm@sha256:D on 10.0.0.1:5000 is
    10.0.0.1:5000/nvidia/vllm@sha256:D (the repository path without its registry)."""
    name, digest = parse_ref(ref)
    if not MIRROR_RE.match(mirror):
        raise ValueError(f"image mirror {mirror!r} is not a registry address (host:port, e.g. 10.0.0.1:5000)")
    first, _, rest = name.partition("/")
    path = rest if rest and ("." in first or ":" in first or first == "localhost") else name
    return f"{mirror}/{path}@{digest}"


def local_ref(ref: str, docker_env: dict | None = None) -> str:
    """A reference to the pinned image in the local store: `ref` itself, or the same digest under another repository
    (pulled through a mirror). '' when the digest is not here."""
    if image_present(ref, docker_env):
        return ref
    _, digest = parse_ref(ref)
    try:
        out = _docker(["image", "ls", "--digests", "--format", "{{.Repository}}@{{.Digest}}"], docker_env)
    except DockerError:  # no docker here (check mode on a bare host): the image is not here either
        return ""
    for line in out.split():
        if line.endswith("@" + digest) and not line.startswith("<none>"):
            return line
    return ""


def seed_mirror(ref: str, mirror: str, docker_env: dict | None = None) -> bool:
    """Make the mirror serve the pinned image: already there (or proxied: this pull fills its cache) → False; else
    copy its manifests and blobs from the image's registry as they are (hostside/registry.py: same digest, no
    recompression) → True. Only a login kept by a docker credential helper falls back to pull + push, and a push
    that changes the digest is refused: the mirror would then serve a different image under the same name."""
    name, digest = parse_ref(ref)
    target = mirror_ref(ref, mirror)
    try:
        _docker(["pull", "--quiet", target], docker_env)
        return False
    except DockerError:
        pass
    try:
        return registry.copy(name, digest, mirror, docker_config=(docker_env or os.environ).get("DOCKER_CONFIG", ""))
    except registry.NeedsCredentialHelper:
        pass
    except registry.RegistryError as exc:
        raise DockerError(f"seeding the mirror {mirror} with {ref}: {exc}") from None
    if not image_present(ref, docker_env):
        _docker(["pull", "--quiet", ref], docker_env)
    tagged = f"{target.split('@', 1)[0]}:spark-agent-{digest[7:19]}"
    tag(ref, tagged, docker_env)
    pushed = push(tagged, docker_env).split("@", 1)[1]
    if pushed != digest:
        raise DockerError(
            f"pushing {ref} to the mirror {mirror} gave {pushed}, not {digest} (docker rewrote the manifest); "
            "use a registry in pull-through (proxy) mode as the mirror instead"
        )
    return True


def repo_digests(image: str, docker_env: dict | None = None) -> list[str]:
    """The `name@sha256:…` entries docker knows for an image (empty for one never pushed or pulled)."""
    out = _docker(["image", "inspect", "--format", "{{json .RepoDigests}}", image], docker_env)
    return json.loads(out) or []


def resolve_tag(tag: str, docker_env: dict | None = None, pull: bool = True) -> str:
    """Pull a tag and return the pinned reference `name@sha256:…` it resolves to right now
    (pull=False: what the tag already in the local store resolves to)."""
    if pull:
        _docker(["pull", "--quiet", tag], docker_env)
    match = _TAG_RE.match(tag)
    name = match.group("name") if match else tag.split("@", 1)[0]
    digests = repo_digests(tag, docker_env)
    for entry in digests:
        if _repo_name(entry) == _repo_name(name):
            return f"{name}@{entry.split('@', 1)[1]}"  # keep the user's spelling of the name
    raise DockerError(f"{tag} pulled, but docker lists no registry digest for it (RepoDigests: {digests})")


def tag(source: str, target: str, docker_env: dict | None = None) -> None:
    _docker(["tag", source, target], docker_env)


def push(ref: str, docker_env: dict | None = None) -> str:
    """Push a tag; return its pinned reference `name@sha256:…`."""
    _docker(["push", ref], docker_env)
    wanted = _repo_name(ref)
    for entry in repo_digests(ref, docker_env):
        if _repo_name(entry) == wanted:
            return entry
    raise DockerError(f"pushed {ref}, but docker recorded no digest for it")


def import_image(tar_path: str, tag: str, changes: list[str], docker_env: dict | None = None) -> str:
    """`docker import` a rootfs tar as image `tag`, applying Dockerfile `changes`. Returns the image id."""
    args = ["import"]
    for change in changes:
        args += ["--change", change]
    return _docker([*args, tar_path, tag], docker_env).strip()


def remove_image(ref: str, docker_env: dict | None = None) -> bool:
    """Remove a local image (by digest or tag). Returns whether it was there."""
    if not image_present(ref, docker_env):
        return False
    _docker(["image", "rm", "--force", ref], docker_env)
    return True


# ---------------------------------------------------------------- containers


def _env_file_text(env: dict) -> str:
    lines = []
    for key, value in env.items():
        value = str(value)
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key) or "\n" in value:
            # the name only: the value may be a secret
            raise ValueError(f"environment variable {key!r} cannot be passed through an env file (bad name or newline)")
        lines.append(f"{key}={value}\n")
    return "".join(lines)


def _run_options(name: str, label: str, gpus: bool, network: str, ipc: str, volumes: Sequence[str] = ()) -> list[str]:
    """`docker run` options of a cell's server (vLLM's docs: --ipc host, for its shared-memory workers), and the
    folders the server reads on the host (serving.volumes: the warm-start cache, the model cache, a model folder)."""
    args = [
        "--name",
        name,
        "--label",
        f"{OUR_LABEL}=1",
        "--label",
        f"{CELL_LABEL}={label}",
        "--network",
        network,
        "--ipc",
        ipc,
    ]
    for volume in volumes:
        args += ["--volume", volume]
    return args + (["--gpus", "all"] if gpus else [])


def launch_line(
    ref: str,
    name: str,
    argv: list[str],
    env: Mapping[str, object],
    label: str,
    gpus: bool = True,
    network: str = "host",
    ipc: str = "host",
    volumes: Sequence[str] = (),
) -> str:
    """The `docker run` that run_server performs, environment spelled out as --env: for launch.txt."""
    env_args = [arg for key, value in env.items() for arg in ("--env", f"{key}={value}")]
    return shlex.join(
        ["docker", "run", "--detach", *_run_options(name, label, gpus, network, ipc, volumes), *env_args, ref, *argv]
    )


def run_server(
    ref: str,
    name: str,
    argv: list[str],
    env: dict,
    label: str,
    gpus: bool = True,
    network: str = "host",
    log_path: str | None = None,
    docker_env: dict | None = None,
    ipc: str = "host",
    volumes: Sequence[str] = (),
) -> ServerContainer:
    """Start the server of one cell, detached: container `name`, labelled with the cell id `label`.

    `argv` follows the image's entrypoint (NVIDIA's vLLM image: `vllm serve MODEL ...`). `env` travels
    through an --env-file so values never show up in `ps`. With `log_path`, a `docker logs -f`
    process appends the container's output there until the container ends.
    """
    parse_ref(ref)
    with tempfile.NamedTemporaryFile("w", prefix="spark-agent-env-", suffix=".list") as env_file:
        env_file.write(_env_file_text(env))
        env_file.flush()
        options = _run_options(name, label, gpus, network, ipc, volumes)
        args = ["run", "--detach", *options, "--env-file", env_file.name]
        try:
            container_id = _docker([*args, ref, *argv], docker_env).strip()
        except DockerError:
            remove(name, docker_env)  # a container that failed to start stays "created" and blocks the name
            raise
    follower = follow_logs(name, log_path, docker_env) if log_path else None
    return ServerContainer(name=name, container_id=container_id, log_follower=follower)


def follow_logs(name: str, log_path: str, docker_env: dict | None = None) -> subprocess.Popen:
    """Append the container's output (stdout and stderr) to `log_path`; ends when the container does."""
    with open(log_path, "ab") as log:
        try:
            return subprocess.Popen(
                ["docker", "logs", "--follow", name], env=docker_env, stdin=subprocess.DEVNULL, stdout=log, stderr=log
            )
        except FileNotFoundError:
            raise DockerError(NOT_INSTALLED) from None


def logs(name: str, docker_env: dict | None = None) -> str:
    """The container's output so far, stdout and stderr together."""
    proc = _cli(["logs", name], docker_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        raise DockerError(proc.stdout.strip())
    return proc.stdout


def _missing(exc: DockerError) -> bool:
    return "No such container" in str(exc)


def stop(name: str, timeout_s: int = 10, docker_env: dict | None = None) -> bool:
    """Stop a container (SIGTERM, SIGKILL after timeout_s). Returns whether it existed."""
    try:
        _docker(["stop", "--time", str(int(timeout_s)), name], docker_env)
    except DockerError as exc:
        if _missing(exc):
            return False
        raise
    return True


def remove(name: str, docker_env: dict | None = None) -> bool:
    """Remove a container, running or not. Returns whether it existed."""
    if state(name, docker_env)["status"] == "missing":  # `rm --force` itself is silent about missing ones
        return False
    _docker(["rm", "--force", name], docker_env)
    return True


def state(name: str, docker_env: dict | None = None) -> dict:
    """{"status": "running"|"exited"|..., "exit_code": int, "running": bool, "oom_killed": bool}; status "missing"
    if absent."""
    try:
        out = _docker(["container", "inspect", "--format", "{{json .State}}", name], docker_env)
    except DockerError as exc:
        if "No such" in str(exc):
            return {"status": "missing", "exit_code": None, "running": False, "oom_killed": False}
        raise
    st = json.loads(out)
    return {
        "status": st.get("Status", ""),
        "exit_code": st.get("ExitCode"),
        "running": bool(st.get("Running")),
        "oom_killed": bool(st.get("OOMKilled")),
    }


# ---------------------------------------------------------------- what is running


def container_digest(name: str, docker_env: dict | None = None) -> str:
    """The registry digest (`sha256:…`) of the image container `name` runs."""
    out = _docker(["container", "inspect", "--format", "{{json .Image}} {{json .Config.Image}}", name], docker_env)
    image_id, started_as = (json.loads(part) for part in out.split(" ", 1))
    digests = repo_digests(image_id, docker_env)
    if not digests:
        raise DockerError(
            f"container {name} runs image {image_id}, which has no registry digest (built locally, never pushed)"
        )
    wanted = _repo_name(started_as)
    for entry in digests:
        if _repo_name(entry) == wanted:
            return entry.split("@", 1)[1]
    return digests[0].split("@", 1)[1]


def verify_running_digest(container: str, expected_ref: str, docker_env: dict | None = None) -> None:
    """Raise DigestMismatch (both digests shown) unless `container` runs exactly `expected_ref`'s image."""
    _, expected = parse_ref(expected_ref)
    out = _docker(["container", "inspect", "--format", "{{json .Image}}", container], docker_env)
    digests = [entry.split("@", 1)[1] for entry in repo_digests(json.loads(out), docker_env)]
    if expected in digests:
        return
    running = ", ".join(sorted(set(digests))) or f"an image with no registry digest ({json.loads(out)})"
    raise DigestMismatch(f"container {container} runs {running} but the cell expects {expected} ({expected_ref})")


_PS_FIELDS = {
    "id": "{{.ID}}",
    "name": "{{.Names}}",
    "image": "{{.Image}}",
    "state": "{{.State}}",
    "ours": '{{.Label "spark-agent"}}',
    "cell": '{{.Label "spark-agent.cell"}}',
    "command": "{{.Command}}",
}


def _ps(args: list[str], docker_env: dict | None) -> list[dict]:
    """`docker ps` rows as dicts with the keys of _PS_FIELDS (ours: bool)."""
    out = _docker(["ps", "--no-trunc", "--format", "\t".join(_PS_FIELDS.values()), *args], docker_env)
    rows: list[dict[str, Any]] = []
    for line in out.splitlines():
        row: dict[str, Any] = dict(zip(_PS_FIELDS, line.split("\t"), strict=False))  # short rows: missing keys
        row["ours"] = row.get("ours") == "1"
        row["command"] = row.get("command", "").strip('"')
        rows.append(row)
    return rows


def list_ours(all_states: bool = True, docker_env: dict | None = None) -> list[dict]:
    """Containers we started (label spark-agent=1): dicts with id, name, image, state, ours, cell, command."""
    return _ps((["--all"] if all_states else []) + ["--filter", f"label={OUR_LABEL}=1"], docker_env)


def list_vllm_like(docker_env: dict | None = None) -> list[dict]:
    """Running containers that hold a model: ours, or any whose image or command mentions vllm."""
    return [
        row
        for row in _ps([], docker_env)
        if row["ours"] or "vllm" in row["image"].lower() or "vllm" in row["command"].lower()
    ]


def docker_env_for(host: str | None) -> dict | None:
    """The CLI environment that talks to daemon `host` (e.g. unix:///path/docker.sock); None = as is."""
    if not host:
        return None
    return {**os.environ, "DOCKER_HOST": host}
