"""A Hugging Face hub double: a real HTTP server in a thread that serves one directory as a model repository under
the routes huggingface_hub's own client calls (its `HfApi.model_info`, `list_repo_tree` and `hf_hub_download`):

    GET  /api/models/{owner}/{name}[/revision/{rev}]   the repo's commit and its files (sizes with ?blobs=true)
    GET  /api/models/{owner}/{name}/tree/{rev}          the files, with sizes and ids
    HEAD /{owner}/{name}/resolve/{rev}/{file}           X-Repo-Commit, ETag, Content-Length
    GET  /{owner}/{name}/resolve/{rev}/{file}           the bytes

    with HubDouble(repo_id="org/tiny", directory=path) as hub:   # binds 127.0.0.1 on a free port
        hub.endpoint                                             # what HF_ENDPOINT would name
        hub.token = "hf_x"        # then every request without `Authorization: Bearer hf_x` gets 401
        hub.claimed_sizes = {...} # sizes the API reports instead of the files' own (a model too big for the disk)
        hub.pause_s = 1.0         # the largest file stops midway this long, so a download is seen in progress
        hub.requests              # (method, path) of every request

Nothing of ours is mocked: the tests' downloads go through huggingface_hub and real HTTP (DESIGN §6).
"""
from __future__ import annotations

import hashlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"  # 40 hex digits: huggingface_hub takes it for a commit


class HubDouble:
    def __init__(self, *, repo_id: str, directory: Path) -> None:
        self.repo_id = repo_id
        self.files = {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}
        self.token: str | None = None
        self.claimed_sizes: dict[str, int] = {}
        self.pause_s = 0.0
        self.requests: list[tuple[str, str]] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> HubDouble:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def downloads(self) -> list[str]:
        """The files whose bytes were asked for."""
        return [path.rsplit("/", 1)[-1] for method, path in self.requests if method == "GET" and "/resolve/" in path]

    def _size(self, name: str) -> int:
        return self.claimed_sizes.get(name, len(self.files[name]))

    def _siblings(self) -> list[dict]:
        return [{"rfilename": n, "size": self._size(n), "blobId": hashlib.sha1(b).hexdigest()}
                for n, b in self.files.items()]

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # quiet: the requests are recorded instead
                pass

            def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                if "Content-Length" not in (headers or {}):
                    self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD" and body:
                    self.wfile.write(body)

            def _json(self, value: object) -> None:
                self._send(200, json.dumps(value).encode(), {"Content-Type": "application/json"})

            def _route(self) -> None:
                path = unquote(urlsplit(self.path).path)
                hub.requests.append((self.command, path))
                if hub.token and self.headers.get("Authorization") != f"Bearer {hub.token}":
                    # The hub's answer to a gated or private model without a valid token.
                    self._send(401, b'{"error": "Access to model is restricted."}',
                               {"Content-Type": "application/json", "X-Error-Code": "GatedRepo"})
                    return
                api = f"/api/models/{hub.repo_id}"
                resolve = f"/{hub.repo_id}/resolve/"
                if path == api or path.startswith(api + "/revision/"):
                    self._json({"id": hub.repo_id, "modelId": hub.repo_id, "sha": COMMIT, "private": False,
                                "siblings": hub._siblings()})
                elif path.startswith(api + "/tree/"):
                    self._json([{"type": "file", "path": s["rfilename"], "size": s["size"], "oid": s["blobId"]}
                                for s in hub._siblings()])
                elif path.startswith(resolve):
                    name = path[len(resolve):].split("/", 1)[-1]
                    if name not in hub.files:
                        self._send(404, b"", {"X-Error-Code": "EntryNotFound"})
                        return
                    self._file(name)
                else:
                    self._send(404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"})

            def _file(self, name: str) -> None:
                body = hub.files[name]
                headers = {"X-Repo-Commit": COMMIT, "ETag": f'"{hashlib.sha1(body).hexdigest()}"',
                           "Content-Length": str(len(body)), "Accept-Ranges": "bytes"}
                self.send_response(200)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                if self.command == "HEAD":
                    return
                largest = max(hub.files, key=lambda n: len(hub.files[n]))
                if name == largest and hub.pause_s:
                    half = len(body) // 2
                    self.wfile.write(body[:half])
                    self.wfile.flush()
                    time.sleep(hub.pause_s)
                    self.wfile.write(body[half:])
                else:
                    self.wfile.write(body)

            do_GET = do_HEAD = _route

        return Handler
