"""A stand-in for the Hugging Face hub: answers what hf_hub_download asks, from memory, with faults on demand.

huggingface_hub 2.x downloads a file in two requests (besides one GET /api/agent-harnesses per
process, answered 404 here):

    HEAD {endpoint}/{repo}/resolve/{revision}/{path}
        git file: 200 with ETag (git blob sha1), Content-Length, X-Repo-Commit
        LFS file: 302 to a CDN with X-Linked-Etag (sha256), X-Linked-Size, X-Repo-Commit, Location
        errors:   404/401/403 with X-Error-Code (RepoNotFound, RevisionNotFound, EntryNotFound, GatedRepo)
    GET  the same url (git file) or the Location (LFS file), with Range: bytes=N- when resuming

Uploads (HfApi.create_repo, upload_folder / create_commit), every file as a regular (non-LFS) file:

    POST {endpoint}/api/repos/create                       {"name", "organization"} -> {"url"}; 409 if it exists
    POST {endpoint}/api/models/{repo}/preupload/{revision}  every file "regular", so none goes through LFS
    POST {endpoint}/api/models/{repo}/commit/{revision}     NDJSON: a header, then base64 "file" and
                                                            "deletedFile" lines -> {"commitUrl", "commitOid"}
    GET  {endpoint}/api/models/{repo}/tree/{revision}       the files, for upload_folder(delete_patterns=)

The commit hash comes from X-Repo-Commit: that is how a branch name is pinned to a
snapshot. The CDN lives on "localhost" while the hub is "127.0.0.1": another origin,
so huggingface_hub takes the metadata from the 302 itself and sends no auth header
to the CDN, as with the real hub.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import json
import re
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

LFS_SUFFIXES = (".safetensors", ".bin", ".pt", ".h5", ".onnx")
COMMIT_RE = re.compile(r"[0-9a-f]{40}")
RESOLVE_RE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<path>.+)$")
CREATE_RE = re.compile(r"^/api/repos/create$")
UPLOAD_RE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/(?P<action>preupload|commit)/(?P<revision>[^/]+)$")
TREE_RE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<revision>[^/]+)$")
CDN_RE = re.compile(r"^/cdn/(?P<repo>[^/]+/[^/]+)/(?P<commit>[0-9a-f]{40})/(?P<path>.+)$")

# What a fault does to one file of one repo:
#   "server-error"      HEAD answers 500 (the hub is down)
#   "server-error-get"  HEAD is fine, the download answers 500
#   "drop"              the download stops half-way and the connection closes, every time
#   "drop-once"         the first download stops half-way; a resumed download (Range) completes
#   "size"              HEAD advertises 100 bytes more than the download delivers
#   "corrupt"           the download has the advertised size, but some bytes differ from the ETag's
FAULTS = ("server-error", "server-error-get", "drop", "drop-once", "size", "corrupt")


def git_blob_sha1(data: bytes) -> str:
    """The ETag the hub gives a file stored in git: git's object id of the blob."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def is_lfs(path: str) -> bool:
    return path.endswith(LFS_SUFFIXES)


def etag_of(path: str, data: bytes) -> str:
    return hashlib.sha256(data).hexdigest() if is_lfs(path) else git_blob_sha1(data)


@dataclass
class Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit hash -> path -> content
    branches: dict[str, str] = field(default_factory=dict)  # branch -> commit hash
    gated: int | None = None  # HTTP status every request gets (401: not logged in, 403: no access granted)


class HubServer:
    """Start with `with HubServer() as hub:`; `hub.endpoint` is what HF_ENDPOINT must be."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.faults: dict[tuple[str, str], str] = {}
        self.requests: list[tuple[str, str]] = []  # (method, path), in arrival order
        self._dropped: set[tuple[str, str]] = set()  # files a "drop-once" fault has already dropped
        self._connections: set[socket.socket] = set()  # open client connections, closed by stop()
        self._lock = threading.Lock()
        self._hold: tuple[str, int, threading.Event] | None = None
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.cdn = f"http://localhost:{self.port}/cdn"
        self.hold_timeouts = 0  # downloads hold_downloads released by its timeout, not by the awaited requests
        # A short poll interval: shutdown() waits for it, once per test.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="hub-server", daemon=True
        )

    # --- set-up ---------------------------------------------------------------------

    def add_commit(self, repo_id: str, files: dict[str, bytes], branch: str | None = "main") -> str:
        """A new commit holding exactly `files`; `branch` (if any) moves to it. Returns its hash."""
        repo = self.repos.setdefault(repo_id, Repo())
        listing = b"".join(name.encode() + b"\0" + etag_of(name, data).encode() for name, data in sorted(files.items()))
        commit = hashlib.sha1(repo_id.encode() + b"\0" + str(len(repo.commits)).encode() + b"\0" + listing).hexdigest()
        repo.commits[commit] = dict(files)
        if branch is not None:
            repo.branches[branch] = commit
        return commit

    def fail(self, repo_id: str, path: str, fault: str) -> None:
        assert fault in FAULTS, fault
        self.faults[(repo_id, path)] = fault

    def clear_faults(self) -> None:
        self.faults.clear()
        self._dropped.clear()

    def count(self, method: str, path_part: str) -> int:
        with self._lock:
            return sum(1 for m, p in self.requests if m == method and path_part in p)

    @contextmanager
    def hold_downloads(self, path: str, until_heads: int, timeout: float = 60.0) -> Iterator[None]:
        """Make every download of `path` wait until `until_heads` HEAD requests for it have arrived.

        Two clients started together then really are in the download at the same time: the
        first cannot finish before the second has asked for the file too.
        """
        released = threading.Event()
        self._hold = (path, until_heads, released)
        self._hold_timeout = timeout
        try:
            yield
        finally:
            self._hold = None
            released.set()

    # --- running --------------------------------------------------------------------

    def __enter__(self) -> HubServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._hold is not None:
            self._hold[2].set()
        self._server.shutdown()
        self._server.server_close()
        # Keep-alive connections outlive the listening socket, and their handler threads would go on
        # answering the client's pooled connections: a stopped hub must be unreachable.
        with self._lock:
            connections = list(self._connections)
        for connection in connections:
            with contextlib.suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)
        self._thread.join(timeout=10)

    # --- answering ------------------------------------------------------------------

    def _record(self, method: str, path: str) -> None:
        with self._lock:
            self.requests.append((method, path))
            hold = self._hold
            if hold is not None and method == "HEAD" and path.endswith("/" + hold[0]):
                heads = sum(1 for m, p in self.requests if m == "HEAD" and p.endswith("/" + hold[0]))
                if heads >= hold[1]:
                    hold[2].set()

    def _wait_if_held(self, path: str) -> None:
        hold = self._hold
        if hold is not None and path == hold[0] and not hold[2].wait(self._hold_timeout):
            with self._lock:
                self.hold_timeouts += 1


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as the real hub: the client pools connections

        def setup(self) -> None:
            super().setup()
            with hub._lock:
                hub._connections.add(self.connection)

        def finish(self) -> None:
            with hub._lock:
                hub._connections.discard(self.connection)
            with contextlib.suppress(OSError):  # the client may be gone, or stop() shut the socket
                super().finish()

        def log_message(self, format: str, *args: object) -> None:  # `format`: the base class's parameter name
            pass  # pytest shows stderr of failing tests; a line per request would bury the failure

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def do_GET(self) -> None:
            self._answer(head=False)

        def do_POST(self) -> None:
            path = unquote(urlsplit(self.path).path)
            hub._record("POST", path)
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if CREATE_RE.match(path):
                request = json.loads(body)
                repo_id = f"{request['organization']}/{request['name']}"
                answer = {"url": f"{hub.endpoint}/{repo_id}", "name": repo_id}
                if repo_id in hub.repos:  # the real hub names the repo in its 409 too (exist_ok reads it)
                    return self._json({**answer, "error": "You already created this model repo"}, status=409)
                hub.add_commit(repo_id, {})
                return self._json(answer)
            match = UPLOAD_RE.match(path)
            repo = hub.repos.get(match["repo"]) if match else None
            if repo is None:
                return self._error(404, "RepoNotFound", f"not a known repo: {path}")
            if match["action"] == "preupload":
                files = json.loads(body)["files"]
                return self._json(
                    {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}
                )
            branch = unquote(match["revision"])
            files = dict(repo.commits[repo.branches[branch]]) if branch in repo.branches else {}
            for line in body.splitlines():
                item = json.loads(line)
                if item["key"] == "file":
                    files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
                elif item["key"] == "deletedFile":
                    files.pop(item["value"]["path"], None)
                elif item["key"] != "header":
                    return self._error(400, None, f"the stand-in hub does not take {item['key']!r} operations")
            commit = hub.add_commit(match["repo"], files, branch=branch)
            return self._json({"commitUrl": f"{hub.endpoint}/{match['repo']}/commit/{commit}", "commitOid": commit})

        def _json(self, data: dict | list, status: int = 200) -> None:
            body = json.dumps(data).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _answer(self, *, head: bool) -> None:
            path = unquote(urlsplit(self.path).path)
            hub._record(self.command, path)
            if match := CDN_RE.match(path):
                repo = hub.repos.get(match["repo"])
                files = repo.commits.get(match["commit"]) if repo else None
                if files is None or match["path"] not in files:
                    return self._error(404, "EntryNotFound", "no such object")
                return self._content(match["repo"], match["commit"], match["path"], files[match["path"]], head)
            if (match := TREE_RE.match(path)) and (repo := hub.repos.get(match["repo"])):
                files = repo.commits[repo.branches[unquote(match["revision"])]]
                tree = [{"type": "file", "path": p, "size": len(d), "oid": git_blob_sha1(d)} for p, d in files.items()]
                return self._json(tree)
            match = RESOLVE_RE.match(path)
            if match is None:
                # Also for GET /api/agent-harnesses, which huggingface_hub fetches once per process: it only
                # tunes the user agent, and an answer would be cached in the real HF_HOME.
                return self._error(404, None, f"not a hub url: {path}")
            repo_id, revision, file_path = match["repo"], unquote(match["revision"]), match["path"]
            repo = hub.repos.get(repo_id)
            if repo is None:
                return self._error(404, "RepoNotFound", f"Repository {repo_id} not found")
            if repo.gated is not None:
                message = f"Access to model {repo_id} is restricted. You must have access to it and be authenticated."
                return self._error(repo.gated, "GatedRepo", message)
            commit = revision if COMMIT_RE.fullmatch(revision) else repo.branches.get(revision)
            if commit is None or commit not in repo.commits:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            files = repo.commits[commit]
            if file_path not in files:
                return self._error(404, "EntryNotFound", f"{file_path} does not exist", commit=commit)
            data = files[file_path]
            fault = hub.faults.get((repo_id, file_path))
            if fault == "server-error" or (fault == "server-error-get" and not head):
                return self._error(500, None, "Internal Error")
            size = len(data) + (100 if fault == "size" else 0)
            if is_lfs(file_path):
                if not head:  # huggingface_hub follows the Location it got from HEAD; a GET here is not expected
                    return self._error(400, None, "download LFS files from the CDN url")
                self.send_response(302)
                self.send_header("Location", f"{hub.cdn}/{repo_id}/{commit}/{file_path}")
                self.send_header("X-Repo-Commit", commit)
                self.send_header("ETag", f'"{git_blob_sha1(b"lfs pointer " + data)}"')
                self.send_header("X-Linked-Etag", f'"{etag_of(file_path, data)}"')
                self.send_header("X-Linked-Size", str(size))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            if head:
                self.send_response(200)
                self._file_headers(commit, etag_of(file_path, data), size)
                self.end_headers()
                return None
            return self._content(repo_id, commit, file_path, data, head)

        def _content(self, repo_id: str, commit: str, file_path: str, data: bytes, head: bool) -> None:
            fault = hub.faults.get((repo_id, file_path))
            if fault == "server-error-get" and not head:
                return self._error(500, None, "Internal Error")
            etag = etag_of(file_path, data)
            if fault == "corrupt":
                middle = len(data) // 2
                data = data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1 :]
            start = 0
            if ranged := re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", "")):
                start = int(ranged[1])
            if head:
                self.send_response(200)
                self._file_headers(commit, etag, len(data))
                self.end_headers()
                return None
            hub._wait_if_held(file_path)
            body = data[start:]
            self.send_response(206 if start else 200)
            self._file_headers(commit, etag, len(body))
            if start:
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
            self.end_headers()
            key = (repo_id, file_path)
            if fault == "drop" or (fault == "drop-once" and key not in hub._dropped):
                hub._dropped.add(key)
                # Bytes up to the middle of the file, then the connection closes; a resume gets nothing more.
                self.wfile.write(body[: max(0, len(data) // 2 - start)])
                self.wfile.flush()
                self.close_connection = True
                return None
            self.wfile.write(body)
            return None

        def _file_headers(self, commit: str, etag: str, length: int) -> None:
            self.send_header("X-Repo-Commit", commit)
            self.send_header("ETag", f'"{etag}"')
            self.send_header("Content-Length", str(length))
            self.send_header("Accept-Ranges", "bytes")

        def _error(self, status: int, code: str | None, message: str, commit: str | None = None) -> None:
            body = json.dumps({"error": message}).encode()
            self.send_response(status)
            if code is not None:
                self.send_header("X-Error-Code", code)
            self.send_header("X-Error-Message", message)
            if commit is not None:
                self.send_header("X-Repo-Commit", commit)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

    return Handler
