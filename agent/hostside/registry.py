"""Copy a pinned image from its registry to the fleet's mirror, blob for blob. Standard library only.

`docker pull` + `docker push` would recompress every layer on the seeding host (minutes of CPU for a 15 GB vLLM
image on a Spark) and gives the pinned digest back only when the new gzip happens to match the original bytes;
copying the manifests and blobs as they are keeps the digest by construction and costs one trip over the slow
link. Speaks the OCI distribution API (v2): GET/HEAD manifests and blobs, the upload POST + PUT, and the
registry's token challenge (anonymous, or the `auths` entry `docker login` wrote into ~/.docker/config.json).
Credentials never leave this process: no argv, no log, no result.
"""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import os
import re
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from .errors import HostError

MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
INDEX_TYPES = MANIFEST_TYPES[:2]
MAX_MANIFEST = 4 * 1024 * 1024  # a manifest is a few KB; a registry that sends more is not trusted
MAX_CHILDREN = 64  # platforms in one index
CHUNK = 1024 * 1024
DOCKER_HUB = ("docker.io", "index.docker.io", "registry-1.docker.io")
_CHALLENGE = re.compile(r'(\w+)="([^"]*)"')
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


class RegistryError(HostError):
    """A registry refused, or answered what a registry does not answer."""


class NeedsCredentialHelper(RegistryError):
    """The registry wants credentials that only docker's credential helper holds (this module can't ask it)."""


@dataclass
class Repo:
    """One repository on one registry: where to send requests, and the token it gave us."""

    registry: str  # host[:port] as requests reach it
    path: str  # the repository path, e.g. nvidia/vllm (library/ubuntu on Docker Hub)
    insecure_ok: bool  # plain HTTP allowed (loopback, or the fleet's own mirror)
    auth_key: str = ""  # the registry's key in docker's config.json auths
    scheme: str = ""  # https or http, found on the first request
    token: str = field(default="", repr=False)

    @classmethod
    def of(cls, name: str, insecure_ok: bool = False) -> Repo:
        """`nvcr.io/nvidia/vllm` → nvcr.io + nvidia/vllm; `vllm/vllm-openai` → Docker Hub + vllm/vllm-openai."""
        first, _, rest = name.partition("/")
        if rest and ("." in first or ":" in first or first == "localhost"):
            registry, path = first, rest
        else:
            registry, path = "docker.io", name
        if registry in DOCKER_HUB:
            path = path if "/" in path else f"library/{path}"
            return cls("registry-1.docker.io", path, False, "https://index.docker.io/v1/")
        loopback = registry.split(":")[0] in ("localhost", "127.0.0.1", "[::1]") or registry.startswith("127.")
        return cls(registry, path, insecure_ok or loopback, registry)

    def url(self, tail: str) -> str:
        return f"{self.scheme or 'https'}://{self.registry}/v2/{self.path}/{tail}"


def copy(name: str, digest: str, mirror: str, docker_config: str = "") -> bool:
    """Make `mirror` serve `name@digest` under the same repository path, byte for byte. False when it already does.
    Every manifest read is checked against its digest before anything is written to the mirror."""
    if not _DIGEST.match(digest):
        raise RegistryError(f"{digest!r} is not sha256:<64 hex>")
    source = Repo.of(name)
    target = Repo(mirror, source.path, insecure_ok=True, auth_key=mirror)
    creds = _credentials(docker_config)
    if _exists(target, f"manifests/{digest}", creds):
        return False
    _copy_manifest(source, target, digest, creds, depth=0)
    return True


def tag_digest(name: str, tag: str, docker_config: str = "") -> str:
    """The digest `name:tag` has on its registry now, asked from here: the registry's Docker-Content-Digest for a
    HEAD (Docker Hub counts no pull for it), else the sha256 of the manifest bytes it sends for the tag (what
    `docker pull` records as the repository digest). RegistryError when it cannot be asked."""
    repo = Repo.of(name)
    creds = _credentials(docker_config)
    accept = {"Accept": ", ".join(MANIFEST_TYPES)}
    try:
        with _request(repo, "HEAD", f"manifests/{tag}", creds, headers=accept) as resp:
            said = (resp.headers.get("Docker-Content-Digest") or "").strip()
    except urllib.error.HTTPError as exc:
        raise RegistryError(f"{repo.registry}/{repo.path}:{tag}: HTTP {exc.code}") from None
    if _DIGEST.fullmatch(said):
        return said
    with _request(repo, "GET", f"manifests/{tag}", creds, headers=accept) as resp:
        body = resp.read(MAX_MANIFEST + 1)
    if len(body) > MAX_MANIFEST:
        raise RegistryError(f"{repo.registry}/{repo.path}:{tag}: manifest over {MAX_MANIFEST} bytes")
    return "sha256:" + hashlib.sha256(body).hexdigest()


def _copy_manifest(source: Repo, target: Repo, digest: str, creds: dict[str, str], depth: int) -> None:
    body, media_type = _get_manifest(source, digest, creds)
    doc = json.loads(body)
    if media_type in INDEX_TYPES:
        if depth:
            raise RegistryError(f"{source.registry}/{source.path}@{digest}: an index inside an index")
        children = doc.get("manifests") or []
        if not isinstance(children, list) or len(children) > MAX_CHILDREN:
            raise RegistryError(f"{source.registry}/{source.path}@{digest}: not a usable index")
        for child in children:  # a registry refuses an index whose manifests it does not have
            _copy_manifest(source, target, _descriptor_digest(child), creds, depth + 1)
    else:
        blobs = [doc.get("config") or {}, *(doc.get("layers") or [])]
        wanted = [_descriptor_digest(b) for b in blobs if not b.get("urls")]  # foreign layers stay where they are
        with ThreadPoolExecutor(max_workers=3) as pool:  # docker pulls three layers at a time, too
            list(pool.map(lambda d: _copy_blob(source, target, d, creds), dict.fromkeys(wanted)))
    _request(target, "PUT", f"manifests/{digest}", creds, body=body, headers={"Content-Type": media_type})
    tag = f"spark-agent-{digest[7:19]}"  # a name people can see in the mirror's tag list (same bytes, same digest)
    if not depth:
        _request(target, "PUT", f"manifests/{tag}", creds, body=body, headers={"Content-Type": media_type})


def _descriptor_digest(desc: Any) -> str:
    digest = desc.get("digest") if isinstance(desc, dict) else None
    if not isinstance(digest, str) or not _DIGEST.match(digest):
        raise RegistryError(f"a manifest names {str(digest)[:80]!r}, not a sha256 digest")
    return digest


def _get_manifest(repo: Repo, digest: str, creds: dict[str, str]) -> tuple[bytes, str]:
    with _request(repo, "GET", f"manifests/{digest}", creds, headers={"Accept": ", ".join(MANIFEST_TYPES)}) as resp:
        body = resp.read(MAX_MANIFEST + 1)
        media_type = (resp.headers.get("Content-Type") or "").split(";")[0].strip()
    if len(body) > MAX_MANIFEST:
        raise RegistryError(f"{repo.registry}/{repo.path}@{digest}: manifest over {MAX_MANIFEST} bytes")
    if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
        raise RegistryError(f"{repo.registry}/{repo.path}: the manifest it sent for {digest} has another digest")
    try:
        declared = json.loads(body).get("mediaType") or ""
    except (ValueError, AttributeError):
        raise RegistryError(f"{repo.registry}/{repo.path}@{digest}: the manifest is not JSON") from None
    media_type = declared or media_type
    if media_type not in MANIFEST_TYPES:
        raise RegistryError(f"{repo.registry}/{repo.path}@{digest}: unsupported manifest type {media_type[:80]!r}")
    return body, media_type


def _copy_blob(source: Repo, target: Repo, digest: str, creds: dict[str, str]) -> None:
    if _exists(target, f"blobs/{digest}", creds):
        return
    with _request(target, "POST", "blobs/uploads/", creds, body=b"") as started:
        location = started.headers.get("Location") or ""
    if not location:
        raise RegistryError(f"{target.registry}: the upload of {digest} got no Location")
    upload = urllib.parse.urljoin(target.url("blobs/uploads/"), location)
    upload += ("&" if "?" in upload else "?") + urllib.parse.urlencode({"digest": digest})
    with _request(source, "GET", f"blobs/{digest}", creds) as blob:
        size = int(blob.headers.get("Content-Length") or -1)
        checked = _Hashing(blob, digest)
        headers = {"Content-Type": "application/octet-stream"}
        if size >= 0:
            headers["Content-Length"] = str(size)
        _request(target, "PUT", "", creds, body=checked, headers=headers, url=upload).close()
    checked.verify()


class _Hashing:
    """The source blob as a file the upload reads, hashed on the way: a source that lies is caught here (and the
    mirror checks the digest on its side too)."""

    def __init__(self, stream: Any, digest: str):
        self.stream, self.digest, self.sha = stream, digest, hashlib.sha256()

    def read(self, n: int = CHUNK) -> bytes:
        data: bytes = self.stream.read(min(n, CHUNK) if n and n > 0 else CHUNK)
        self.sha.update(data)
        return data

    def __iter__(self) -> Iterator[bytes]:
        while data := self.read(CHUNK):
            yield data

    def verify(self) -> None:
        if "sha256:" + self.sha.hexdigest() != self.digest:
            raise RegistryError(f"the source sent a blob whose content is not {self.digest}")


def _exists(repo: Repo, tail: str, creds: dict[str, str]) -> bool:
    try:
        _request(repo, "HEAD", tail, creds, headers={"Accept": ", ".join(MANIFEST_TYPES)}).close()
        return True
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return False
        raise RegistryError(f"{repo.registry}/{repo.path}: HEAD {tail}: HTTP {exc.code}") from None


def _request(
    repo: Repo,
    method: str,
    tail: str,
    creds: dict[str, str],
    body: Any = None,
    headers: dict[str, str] | None = None,
    url: str = "",
    _retried: bool = False,
) -> Any:
    """One request, with the scheme found once (https, then http where allowed) and one token challenge answered."""
    if not repo.scheme:
        repo.scheme = _scheme(repo)
        url = url.replace("https://", f"{repo.scheme}://", 1) if url else url
    req = urllib.request.Request(url or repo.url(tail), data=body, method=method, headers=headers or {})
    if repo.token:  # never sent on to a redirect's host (blob storage behind the registry)
        req.add_unredirected_header("Authorization", repo.token)
    try:
        return urllib.request.urlopen(req, timeout=60)
    except urllib.error.HTTPError as exc:
        if exc.code == 401 and not _retried and not hasattr(body, "read"):
            repo.token = _answer(repo, exc.headers.get("WWW-Authenticate") or "", creds)
            exc.close()
            return _request(repo, method, tail, creds, body, headers, url, _retried=True)
        if method == "HEAD" and exc.code in (401, 404):
            raise
        if exc.code == 401:
            raise RegistryError(f"{repo.registry}/{repo.path}: {method} {tail}: the login was refused") from None
        if exc.code == 404:
            raise RegistryError(f"{repo.registry}/{repo.path}: {tail} is not there (HTTP 404)") from None
        detail = exc.read(300).decode("utf-8", "replace")
        raise RegistryError(
            f"{repo.registry}/{repo.path}: {method} {tail or 'upload'}: HTTP {exc.code} {' '.join(detail.split())}"
        ) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
        raise RegistryError(f"{repo.registry}: {exc}") from None


def _scheme(repo: Repo) -> str:
    """https unless the registry does not speak TLS and plain HTTP is allowed for it (as docker's insecure list)."""
    try:
        urllib.request.urlopen(f"https://{repo.registry}/v2/", timeout=10).close()
        return "https"
    except urllib.error.HTTPError:
        return "https"  # it answered over TLS (401 wants a token): TLS it is
    except (urllib.error.URLError, ssl.SSLError, OSError, http.client.HTTPException):
        if repo.insecure_ok:
            return "http"
        raise RegistryError(
            f"{repo.registry}: no TLS answer, and plain HTTP is only used for the mirror or loopback"
        ) from None


def _answer(repo: Repo, challenge: str, creds: dict[str, str]) -> str:
    """The Authorization header for a 401's challenge: Basic from docker's config, or a Bearer token."""
    scheme, _, params_text = challenge.partition(" ")
    params = dict(_CHALLENGE.findall(params_text))
    basic = creds.get(repo.auth_key) or creds.get(repo.registry, "")
    if scheme.lower() == "basic":
        if not basic:
            raise RegistryError(f"{repo.registry} wants a login: run `docker login {repo.registry}` on this host")
        return f"Basic {basic}"
    if scheme.lower() != "bearer" or not params.get("realm", "").startswith(("https://", "http://")):
        raise RegistryError(f"{repo.registry}: an authentication challenge this copy does not speak")
    if (creds.get("@helper:" + repo.auth_key) or creds.get("@helper:*")) and not basic:
        raise NeedsCredentialHelper(f"{repo.registry}: the login is kept by a docker credential helper")
    query = {k: v for k, v in params.items() if k in ("service", "scope")}
    token_req = urllib.request.Request(params["realm"] + "?" + urllib.parse.urlencode(query))
    if basic:
        token_req.add_unredirected_header("Authorization", f"Basic {basic}")
    try:
        with urllib.request.urlopen(token_req, timeout=30) as resp:
            answer = json.loads(resp.read(MAX_MANIFEST))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise RegistryError(f"{repo.registry}: no token from its auth service ({exc.__class__.__name__})") from None
    token = answer.get("token") or answer.get("access_token") if isinstance(answer, dict) else None
    if not isinstance(token, str) or not token:
        raise RegistryError(f"{repo.registry}: its auth service gave no token")
    return f"Bearer {token}"


def _credentials(docker_config: str) -> dict[str, str]:
    """registry → base64 "user:password" from docker's config.json `auths` (what `docker login` writes without a
    credential helper); "@helper:<registry>" marks registries whose login a helper keeps."""
    path = docker_config or os.path.join(os.environ.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker"), "")
    path = os.path.join(path, "config.json") if os.path.isdir(path) else path
    try:
        with open(path, encoding="utf-8") as f:
            config = json.loads(f.read(MAX_MANIFEST))
    except (OSError, ValueError):
        return {}
    out: dict[str, str] = {}
    if not isinstance(config, dict):
        return out
    for registry, entry in (config.get("auths") or {}).items():
        auth = entry.get("auth") if isinstance(entry, dict) else None
        if isinstance(auth, str) and auth:
            try:
                base64.b64decode(auth, validate=True)
            except ValueError:
                continue
            out[registry.removeprefix("https://").removeprefix("http://").rstrip("/")] = auth
            out[registry] = auth
    helpers = dict(config.get("credHelpers") or {})
    if config.get("credsStore"):
        helpers.setdefault("*", config["credsStore"])
    for registry in helpers:
        out["@helper:" + registry] = "1"
    return out
