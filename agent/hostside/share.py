"""Copy a checkpoint folder from one host to the others over the fleet's own links. Standard library only.

The host that has the folder serves it read-only over HTTP on its fleet address, to holders of a one-time token;
the others fetch it, check every file's size and the hash of every safetensors header against the source's
manifest, and only then move the folder into place. Nothing is downloaded from the internet N times, no host needs
SSH access to another, and a half-copied folder never looks like a checkpoint.

Why HTTP and not rsync: rsync between hosts needs one host to log in to the other (keys and host keys between
Sparks); a pull over HTTP needs only the token that Ansible hands both sides (no_log, never on a command line), and
the manifest check makes the copy as trustworthy as the source.

The receiver never takes where to fetch from from a host (issue 30): the address is the one the controller knows for
the source (its inventory), the scheme is http, and only the port comes from the source, as a number. Redirects are
not followed and no proxy is used: a hostile source cannot point the receiver at a file:// path, at one of the
receiver's own loopback services or at anything else.
"""

from __future__ import annotations

import hashlib
import hmac
import http.server
import ipaddress
import json
import os
import re
import shutil
import signal
import socketserver
import struct
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, TypedDict

from .errors import HostError

MAX_FILES = 4096
MAX_NAME = 255
MAX_MANIFEST_BYTES = 4 * 1024 * 1024
HEADER_LIMIT = 100 * 1024 * 1024  # the same ceiling hostside/safetensors.py puts on one header
CHUNK = 1024 * 1024
# A relative path inside the folder: plain names, no '..', nothing a shell or a URL could misread.
_REL = re.compile(r"^(?!.*(^|/)\.\.?(/|$))[A-Za-z0-9._+=@-][A-Za-z0-9._+=@/-]{0,1023}$")


def safe_relative_path(path: str) -> bool:
    """A relative path inside a checkpoint folder that we will write (also for the hub's file names: hub.py)."""
    return bool(_REL.fullmatch(path))


class ShareError(HostError):
    """The copy cannot go on; the message says which file and what to do."""


class ManifestEntry(TypedDict):
    path: str  # relative to the folder
    size: int
    header_sha256: str  # sha256 of the 8-byte length + JSON header of a .safetensors file; "" for other files


class Manifest(TypedDict):
    files: list[ManifestEntry]
    total_bytes: int
    headers_sha256: str  # one hash over every shard's header hash, in path order: the checkpoint's identity


# ---------------------------------------------------------------------------------------------- manifest
def header_sha256(path: str | os.PathLike[str]) -> str:
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise ShareError(f"{path}: too short for a safetensors file")
        (length,) = struct.unpack("<Q", prefix)
        if length > HEADER_LIMIT or length > os.fstat(f.fileno()).st_size - 8:
            raise ShareError(f"{path}: header length {length} is impossible; the file is corrupt or truncated")
        return hashlib.sha256(prefix + f.read(length)).hexdigest()


def manifest(folder: str | os.PathLike[str]) -> Manifest:
    """Every regular file of the folder (recursively), its size and, for shards, its header hash. A symlink that
    leads out of the folder is refused: the copy would carry someone else's file."""
    root = Path(os.path.expanduser(str(folder)))
    if not root.is_dir():
        raise ShareError(f"{root}: not a folder on this host")
    real_root = os.path.realpath(root)
    entries: list[ManifestEntry] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]  # .cache/ of a hub download: not the model
        for name in sorted(n for n in filenames if not n.startswith(".")):
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            if not _REL.fullmatch(rel):
                raise ShareError(f"{full}: a file name the copy will not carry (rename it)")
            real = os.path.realpath(full)
            if not real.startswith(real_root + os.sep) and not _hf_cache_blob(real_root, real):
                raise ShareError(f"{full}: a symlink out of the folder (to {real}); copy the file into the folder")
            if not os.path.isfile(real):
                continue
            entries.append(
                ManifestEntry(
                    path=rel,
                    size=os.path.getsize(real),
                    header_sha256=header_sha256(real) if name.endswith(".safetensors") else "",
                )
            )
            if len(entries) > MAX_FILES:
                raise ShareError(f"{root}: more than {MAX_FILES} files; not a checkpoint folder")
    if not entries:
        raise ShareError(f"{root}: the folder is empty")
    shard_hashes = "".join(e["header_sha256"] for e in entries if e["header_sha256"])
    return Manifest(
        files=entries,
        total_bytes=sum(e["size"] for e in entries),
        headers_sha256=hashlib.sha256(shard_hashes.encode()).hexdigest(),
    )


def _hf_cache_blob(real_root: str, real: str) -> bool:
    """Hugging Face cache snapshots link to ../../blobs/: those links stay inside the model's cache folder."""
    parts = Path(real_root).parts
    if "snapshots" not in parts:
        return False
    model_root = str(Path(*parts[: parts.index("snapshots")]))
    return real.startswith(model_root + os.sep + "blobs" + os.sep)


def check_manifest(data: Any) -> Manifest:
    """A manifest from another host (or from the controller): untrusted until its shape and names are checked."""
    if not isinstance(data, dict) or not isinstance(data.get("files"), list):
        raise ShareError("the manifest is not an object with a files list")
    files = data["files"]
    if not 0 < len(files) <= MAX_FILES:
        raise ShareError(f"the manifest lists {len(files)} files (1 to {MAX_FILES} allowed)")
    seen: set[str] = set()
    entries: list[ManifestEntry] = []
    for f in files:
        if not isinstance(f, dict):
            raise ShareError("a manifest entry is not an object")
        path, size, digest = f.get("path"), f.get("size"), f.get("header_sha256", "")
        if not isinstance(path, str) or not _REL.fullmatch(path) or path in seen:
            raise ShareError(f"the manifest names {str(path)[:80]!r}: not a plain relative path, or twice")
        if type(size) is not int or size < 0:
            raise ShareError(f"the manifest gives {path} the size {str(size)[:40]!r}")
        if not isinstance(digest, str) or not re.fullmatch(r"([0-9a-f]{64})?", digest):
            raise ShareError(f"the manifest gives {path} a header hash that is not sha256 hex")
        seen.add(path)
        entries.append(ManifestEntry(path=path, size=size, header_sha256=digest))
    headers = data.get("headers_sha256")
    if not isinstance(headers, str) or not re.fullmatch(r"[0-9a-f]{64}", headers):
        raise ShareError("the manifest's headers_sha256 is not sha256 hex")
    return Manifest(files=entries, total_bytes=sum(e["size"] for e in entries), headers_sha256=headers)


# ---------------------------------------------------------------------------------------------- serving
class _Handler(http.server.BaseHTTPRequestHandler):
    server: _ShareServer

    def log_message(self, format: str, *args: Any) -> None:  # no access log on stderr
        pass

    def do_GET(self) -> None:
        self.server.touched = time.monotonic()
        given = self.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {self.server.token}".encode()):
            self.send_error(403)
            return
        path = urllib.parse.unquote(self.path)
        if path == "/manifest":
            body = json.dumps(self.server.manifest).encode()
            self._headers(200, len(body), "application/json")
            self.wfile.write(body)
            return
        rel = path.removeprefix("/file/")
        if rel == path or rel not in self.server.sizes:  # only what the manifest lists, nothing else on the host
            self.send_error(404)
            return
        size = self.server.sizes[rel]
        self._headers(200, size, "application/octet-stream")
        with open(os.path.join(self.server.folder, rel), "rb") as f:
            left = size
            while left > 0:
                chunk = f.read(min(CHUNK, left))
                if not chunk:
                    break
                self.wfile.write(chunk)
                left -= len(chunk)
                self.server.touched = time.monotonic()

    def _headers(self, status: int, length: int, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(length))
        self.end_headers()


class _ShareServer(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], folder: str, token: str, man: Manifest):
        super().__init__(address, _Handler)
        self.folder, self.token, self.manifest = folder, token, man
        self.sizes = {e["path"]: e["size"] for e in man["files"]}
        self.touched = time.monotonic()


def serve(folder: str, bind: str, port: int, token: str, idle_s: float, state_file: str) -> dict[str, Any]:
    """Fork a server for the folder and return {pid, url, manifest} once it listens. It stops on SIGTERM, or by
    itself after `idle_s` seconds without a request, so a lost controller leaves nothing running for long."""
    if len(token) < 16:
        raise ShareError("the share token is too short (16 characters at least)")
    man = manifest(folder)
    server = _ShareServer((bind, port), os.path.realpath(os.path.expanduser(folder)), token, man)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the server: never returns
        os.close(read_fd)
        try:
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDWR)  # let go of Ansible's pipes, or the task never ends
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            os.write(write_fd, b"ok")
            os.close(write_fd)
            _serve_until_idle(server, idle_s)
        finally:
            os._exit(0)
    os.close(write_fd)
    server.socket.close()  # the child has it
    os.read(read_fd, 2)
    os.close(read_fd)
    port = server.server_address[1]
    info = {"pid": pid, "url": f"http://{_url_host(bind)}:{port}", "port": port, "folder": str(folder)}
    Path(state_file).parent.mkdir(parents=True, exist_ok=True)
    Path(state_file).write_text(json.dumps(info))
    return {**info, "manifest": man}


def _url_host(bind: str) -> str:
    return f"[{bind}]" if ":" in bind else bind


def _serve_until_idle(server: _ShareServer, idle_s: float) -> None:
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=server.shutdown, daemon=True).start())
    watcher = threading.Thread(target=_stop_when_idle, args=(server, idle_s), daemon=True)
    watcher.start()
    server.serve_forever(poll_interval=0.2)


def _stop_when_idle(server: _ShareServer, idle_s: float) -> None:
    while time.monotonic() - server.touched < idle_s:
        time.sleep(min(1.0, idle_s / 4))
    server.shutdown()


def stop(state_file: str) -> bool:
    """Stop the server recorded in the state file (if it still runs). True when one was stopped."""
    try:
        info = json.loads(Path(state_file).read_text())
    except (OSError, ValueError):
        return False
    Path(state_file).unlink(missing_ok=True)
    pid = info.get("pid") if isinstance(info, dict) else None
    if type(pid) is not int or pid <= 1:
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    return True


def _alive(pid: int) -> bool:
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our own child (a test, not a module): reap it
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# ---------------------------------------------------------------------------------------------- fetching
_HOST_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,62})(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,62}))*$")


def source_url(address: str, port: int) -> str:
    """http://ADDRESS:PORT of the source: ADDRESS an IP address or a plain host name (the controller's, from the
    inventory), PORT a number. Anything else (a scheme, a path, a fragment) is refused."""
    try:
        ipaddress.ip_address(address)
    except ValueError:
        if not _HOST_NAME.fullmatch(address) or len(address) > 253:
            raise ShareError(f"the source's address {address[:80]!r} is not an IP address or a host name") from None
    if type(port) is not int or not 0 < port < 65536:
        raise ShareError(f"the source's port {str(port)[:20]!r} is not a port number")
    return f"http://{_url_host(address)}:{port}"


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        raise urllib.error.HTTPError(req.full_url, code, f"a redirect to {newurl[:120]!r} (not followed)", headers, fp)


# http only: no file://, ftp:// or data: handler, no proxy from the environment, no redirect followed
_OPENER = urllib.request.OpenerDirector()
for _handler in (
    urllib.request.HTTPHandler(),
    urllib.request.HTTPDefaultErrorHandler(),
    urllib.request.HTTPErrorProcessor(),
    _NoRedirects(),
):
    _OPENER.add_handler(_handler)


def matches(folder: str, expected: Manifest) -> bool:
    """The folder already holds this checkpoint (same files, sizes and header hashes)."""
    try:
        here = manifest(folder)
    except ShareError:
        return False
    return here["files"] == expected["files"]


def fetch(address: str, port: int, token: str, dest: str, expected: Manifest, timeout: float = 60.0) -> int:
    """Copy the folder served at source_url(address, port) to `dest` and check it against `expected` (the manifest
    the controller got from the source, not the one this download claims). Returns the bytes copied; 0 when `dest`
    already matches."""
    url = source_url(address, port)
    expected = check_manifest(expected)
    dest = os.path.expanduser(dest)
    if matches(dest, expected):
        return 0
    if os.path.exists(dest):
        raise ShareError(f"{dest}: exists and is not this checkpoint; move it away first (nothing was changed)")
    parent = os.path.dirname(os.path.abspath(dest))
    os.makedirs(parent, exist_ok=True)
    partial = os.path.join(parent, f".{os.path.basename(dest)}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    copied = 0
    try:
        for entry in expected["files"]:
            copied += _fetch_file(url, token, entry, os.path.join(partial, entry["path"]), timeout)
        got = manifest(partial)
        if got["files"] != expected["files"]:
            raise ShareError(f"{dest}: the copy does not match the source's manifest; nothing was kept")
        os.rename(partial, dest)
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return copied


def _fetch_file(url: str, token: str, entry: ManifestEntry, target: str, timeout: float) -> int:
    request = urllib.request.Request(
        f"{url}/file/{urllib.parse.quote(entry['path'])}", headers={"Authorization": f"Bearer {token}"}
    )
    os.makedirs(os.path.dirname(target), exist_ok=True)
    written = 0
    try:
        with _OPENER.open(request, timeout=timeout) as resp, open(target, "wb") as out:
            while written <= entry["size"]:
                chunk = resp.read(CHUNK)
                if not chunk:
                    break
                written += len(chunk)
                if written > entry["size"]:
                    break
                out.write(chunk)
    except OSError as exc:
        raise ShareError(f"{entry['path']}: the copy from {url} failed ({exc})") from None
    if written != entry["size"]:
        raise ShareError(f"{entry['path']}: got {written} bytes, the manifest says {entry['size']}; nothing was kept")
    if entry["header_sha256"] and header_sha256(target) != entry["header_sha256"]:
        raise ShareError(f"{entry['path']}: its safetensors header differs from the source's; nothing was kept")
    return written


def fetch_manifest(address: str, port: int, token: str, timeout: float = 30.0) -> Manifest:
    url = source_url(address, port)
    request = urllib.request.Request(f"{url}/manifest", headers={"Authorization": f"Bearer {token}"})
    try:
        with _OPENER.open(request, timeout=timeout) as resp:
            raw = resp.read(MAX_MANIFEST_BYTES + 1)
    except OSError as exc:
        raise ShareError(f"no manifest from {url} ({exc})") from None
    if len(raw) > MAX_MANIFEST_BYTES:
        raise ShareError(f"the manifest from {url} is larger than {MAX_MANIFEST_BYTES} bytes")
    try:
        return check_manifest(json.loads(raw))
    except ValueError:
        raise ShareError(f"the manifest from {url} is not JSON") from None
