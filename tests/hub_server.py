"""A small Hugging Face hub for tests (there is no network here): the two endpoints a snapshot download uses, served
from a folder exactly in the hub's response shapes, behind a token, counting every file download.

Shapes, as the hub documents and answers them:
- GET {endpoint}/api/models/{repo_id}/revision/{revision} -> the model info JSON: "_id", "id", "modelId", "sha"
  (the commit the revision resolves to), "siblings": [{"rfilename": ...}, ...] and more fields we do not read.
  https://huggingface.co/docs/hub/api ("GET /api/models/{repo_id}/revision/{revision}"), and huggingface_hub's
  HfApi.model_info / ModelInfo.siblings[].rfilename (https://huggingface.co/docs/huggingface_hub/package_reference/hf_api).
- GET {endpoint}/{repo_id}/resolve/{revision}/{filename} -> the file's bytes, with Content-Length, ETag and
  X-Repo-Commit headers; 401 without a valid token for a gated/private repo.
  https://huggingface.co/docs/huggingface_hub/package_reference/file_download (hf_hub_url: "{endpoint}/{repo_id}/
  resolve/{revision}/{filename}"; get_hf_file_metadata reads X-Repo-Commit and ETag).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import threading
import urllib.parse
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class FakeHub:
    """repos: repo id -> folder of its files. Every repo has one commit (sha of the repo id), branch "main"."""

    address: str
    repos: dict[str, Path]
    token: str
    downloads: Counter = field(default_factory=Counter)  # "repo/file" -> times its bytes were sent
    refused: int = 0  # requests without the right token
    server: http.server.ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://{self.address}:{self.server.server_address[1]}"

    @staticmethod
    def commit(repo: str) -> str:
        return hashlib.sha1(repo.encode()).hexdigest()

    def start(self) -> FakeHub:
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet
                pass

            def do_GET(self) -> None:
                if self.headers.get("Authorization") != f"Bearer {hub.token}":
                    hub.refused += 1
                    self._send(401, b'{"error":"Invalid credentials in Authorization header"}', "application/json")
                    return
                path = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path)
                parts = path.strip("/").split("/")
                if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
                    self._info(f"{parts[2]}/{parts[3]}", "/".join(parts[5:]))
                elif len(parts) >= 5 and parts[2] == "resolve":
                    self._file(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]))
                else:
                    self._send(404, b'{"error":"Not Found"}', "application/json")

            def _info(self, repo: str, revision: str) -> None:
                folder = hub.repos.get(repo)
                if folder is None or revision not in ("main", hub.commit(repo)):
                    self._send(404, b'{"error":"Repository not found"}', "application/json")
                    return
                files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
                body = {
                    "_id": hashlib.md5(repo.encode()).hexdigest()[:24],
                    "id": repo,
                    "modelId": repo,
                    "author": repo.split("/")[0],
                    "sha": hub.commit(repo),
                    "private": False,
                    "gated": "manual",
                    "disabled": False,
                    "library_name": "transformers",
                    "tags": ["safetensors"],
                    "siblings": [{"rfilename": f} for f in files],
                }
                self._send(200, json.dumps(body).encode(), "application/json")

            def _file(self, repo: str, revision: str, name: str) -> None:
                folder = hub.repos.get(repo)
                target = (folder / name) if folder else None
                if target is None or revision not in ("main", hub.commit(repo)) or not target.is_file():
                    self._send(404, b"Entry not found", "text/plain")
                    return
                data = target.read_bytes()
                hub.downloads[f"{repo}/{name}"] += 1
                self._send(200, data, "application/octet-stream", etag=hashlib.sha256(data).hexdigest(), repo=repo)

            def _send(self, code: int, body: bytes, kind: str, etag: str = "", repo: str = "") -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                if etag:
                    self.send_header("ETag", f'"{etag}"')
                    self.send_header("X-Repo-Commit", hub.commit(repo))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer((self.address, 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
