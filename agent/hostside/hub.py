"""Download a checkpoint from a Hugging Face hub once, on one host, into the hub cache layout. Standard library only.

A fleet that serves a hub id would otherwise download it once per host (vLLM resolves it on each). With
`spark_hub_download_once`, one host downloads it here and the others get a verified copy over the fleet's link
(share.py, playbooks/hub_checkpoint.yml). The files land where huggingface_hub (and so vLLM) looks for them:
<cache>/models--<org>--<name>/snapshots/<commit>/<file>, with refs/<revision> holding the commit, so a server given
the hub id finds them without downloading again.

Two hub endpoints (https://huggingface.co/docs/hub/api, "GET /api/models/{repo_id}/revision/{revision}", and the
file URL https://huggingface.co/{repo_id}/resolve/{revision}/{filename}): the first gives the commit (`sha`) and the
file list (`siblings[].rfilename`), the second each file. The token goes in an Authorization header, never in a URL,
and is not sent on to another host a redirect points at (a CDN). Nothing the hub says is trusted: names are checked
like the share's, counts and sizes are bounded, and a half-downloaded snapshot never looks like one.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from .errors import HostError
from .share import CHUNK, MAX_FILES, safe_relative_path

MAX_INFO_BYTES = 8 * 1024 * 1024
MAX_FILE_BYTES = 1 << 40  # 1 TiB: no checkpoint file is larger
REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
REVISION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$")
COMMIT = re.compile(r"^[0-9a-f]{40}$")


class HubError(HostError):
    """The download cannot go on; the message says which file or answer and what to do."""


def is_repo_id(model: str) -> bool:
    """A hub id (org/name), not a path on the host."""
    return bool(REPO.fullmatch(model))


def repo_folder(cache: str, repo: str) -> str:
    """huggingface_hub's folder for a model repo: models--org--name."""
    return os.path.join(os.path.expanduser(cache), "models--" + repo.replace("/", "--"))


def snapshot_path(cache: str, repo: str, commit: str) -> str:
    return os.path.join(repo_folder(cache, repo), "snapshots", commit)


class _NoTokenElsewhere(urllib.request.HTTPRedirectHandler):
    """Follow the hub's redirects (large files go to a CDN), but never hand the token to another host."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl).netloc != urllib.parse.urlsplit(req.full_url).netloc:
            new.remove_header("Authorization")
        return new


_opener = urllib.request.build_opener(_NoTokenElsewhere)


def _request(url: str, token: str) -> urllib.request.Request:
    headers = {"User-Agent": "spark-agent"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return urllib.request.Request(url, headers=headers)


def revision_info(endpoint: str, repo: str, revision: str, token: str, timeout: float = 30.0) -> tuple[str, list[str]]:
    """(commit, files) of the repo at `revision`, checked."""
    url = f"{endpoint.rstrip('/')}/api/models/{repo}/revision/{urllib.parse.quote(revision, safe='')}"
    try:
        with _opener.open(_request(url, token), timeout=timeout) as resp:
            raw = resp.read(MAX_INFO_BYTES + 1)
    except urllib.error.HTTPError as exc:
        hint = " (is the token right, and does it have access?)" if exc.code in (401, 403) else ""
        raise HubError(f"{repo}@{revision}: the hub answered {exc.code}{hint}") from None
    except OSError as exc:
        raise HubError(f"{repo}@{revision}: the hub did not answer ({exc})") from None
    if len(raw) > MAX_INFO_BYTES:
        raise HubError(f"{repo}@{revision}: the hub's answer is larger than {MAX_INFO_BYTES} bytes")
    try:
        info = json.loads(raw)
    except ValueError:
        raise HubError(f"{repo}@{revision}: the hub's answer is not JSON") from None
    if not isinstance(info, dict) or not COMMIT.fullmatch(str(info.get("sha", ""))):
        raise HubError(f"{repo}@{revision}: the hub's answer has no commit sha")
    siblings = info.get("siblings")
    if not isinstance(siblings, list) or not siblings or len(siblings) > MAX_FILES:
        raise HubError(f"{repo}@{revision}: the hub lists no files (or more than {MAX_FILES})")
    files = []
    for s in siblings:
        name = s.get("rfilename") if isinstance(s, dict) else None
        if not isinstance(name, str) or not safe_relative_path(name):
            raise HubError(f"{repo}@{revision}: the hub lists a file name we will not write: {str(name)[:80]!r}")
        files.append(name)
    return str(info["sha"]), sorted(set(files))


def download(endpoint: str, repo: str, revision: str, cache: str, token: str, timeout: float = 60.0) -> dict[str, Any]:
    """Download `repo` at `revision` into the cache (idempotent: a snapshot already there is not downloaded
    again). Returns {path, commit, files, bytes (0 when already there), downloaded}."""
    if not is_repo_id(repo):
        raise HubError(f"{repo!r} is not a hub id (org/name)")
    if not REVISION.fullmatch(revision) or ".." in revision:
        raise HubError(f"{revision!r} is not a revision (a branch, tag or commit)")
    commit, files = revision_info(endpoint, repo, revision, token, timeout)
    dest = snapshot_path(cache, repo, commit)
    written = 0
    if not all(os.path.isfile(os.path.join(dest, f)) for f in files):
        if os.path.exists(dest):
            raise HubError(f"{dest}: exists but lacks files of {repo}@{commit}; move it away first")
        partial = os.path.join(os.path.dirname(dest), f".{commit}.partial-{os.getpid()}")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            for name in files:
                written += _download_file(endpoint, repo, commit, name, os.path.join(partial, name), token, timeout)
            os.rename(partial, dest)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
    write_ref(cache, repo, revision, commit)
    return {"path": dest, "commit": commit, "files": len(files), "bytes": written, "downloaded": written > 0}


def write_ref(cache: str, repo: str, revision: str, commit: str) -> None:
    """refs/<revision> → commit, as huggingface_hub keeps it (a commit needs no ref)."""
    if not COMMIT.fullmatch(commit):
        raise HubError(f"{commit!r} is not a commit")
    if revision == commit:
        return
    ref = os.path.join(repo_folder(cache, repo), "refs", revision)
    os.makedirs(os.path.dirname(ref), exist_ok=True)
    tmp = f"{ref}.tmp-{os.getpid()}"
    with open(tmp, "w", encoding="ascii") as fh:
        fh.write(commit)
    os.replace(tmp, ref)


def _download_file(endpoint: str, repo: str, commit: str, name: str, target: str, token: str, timeout: float) -> int:
    url = f"{endpoint.rstrip('/')}/{repo}/resolve/{commit}/{urllib.parse.quote(name)}"
    os.makedirs(os.path.dirname(target), exist_ok=True)
    written = 0
    try:
        with _opener.open(_request(url, token), timeout=timeout) as resp, open(target, "wb") as out:
            expected = resp.headers.get("Content-Length")
            while True:
                chunk = resp.read(CHUNK)
                if not chunk:
                    break
                written += len(chunk)
                if written > MAX_FILE_BYTES:
                    raise HubError(f"{repo}/{name}: larger than {MAX_FILE_BYTES} bytes")
                out.write(chunk)
    except urllib.error.HTTPError as exc:
        raise HubError(f"{repo}/{name}: the hub answered {exc.code}") from None
    except OSError as exc:
        raise HubError(f"{repo}/{name}: the download failed ({exc})") from None
    if expected is not None and expected.isdigit() and int(expected) != written:
        raise HubError(f"{repo}/{name}: got {written} bytes of {expected}; nothing was kept")
    return written
