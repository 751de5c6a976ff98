"""A Hub-API test server: the part of the Hugging Face Hub's HTTP API that
``huggingface_hub`` calls to check a token (whoami), create a repo, commit files
(regular and LFS), make branches and tags, list a tree and download files by revision,
with the Hub's not-found errors. It keeps repositories in memory, serves on 127.0.0.1, and
checks what it is sent (the LFS sha256, the token for writes) as the Hub would.

``python tests/hubserver.py`` runs one in the foreground for trying things by hand.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

import yaml

LFS_THRESHOLD = 10_000
"""Files larger than this, and every .safetensors file, go through LFS."""


def goes_to_lfs(path: str, size: int) -> bool:
    return size > LFS_THRESHOLD or path.endswith(".safetensors")


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Entry:
    size: int
    blob: str          # git blob id (of the pointer file for LFS entries)
    lfs: str | None    # sha256 of the content for LFS entries


@dataclass
class Commit:
    oid: str
    files: dict[str, Entry]
    message: str


@dataclass
class Repo:
    repo_id: str
    private: bool
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)

    def resolve(self, revision: str) -> Commit | None:
        revision = unquote(revision)
        oid = self.branches.get(revision) or self.tags.get(revision)
        if oid is None and re.fullmatch(r"[0-9a-f]{40}", revision):
            oid = revision if revision in self.commits else None
        return self.commits.get(oid) if oid else None


@dataclass
class Fault:
    """A failure the server injects into the next ``times`` downloads (GET) of ``filename``:
    ``status`` (answer with that HTTP status), ``cut`` (send the headers and half the body,
    then close the connection), ``slow`` (wait ``seconds`` before answering) or ``flip``
    (the right length, 64 bytes inverted)."""

    filename: str
    kind: str
    times: int = 1
    status: int = 500
    seconds: float = 0.0


class HubState:
    """Repositories, blobs (regular content by git blob id) and LFS objects (by sha256),
    and the faults to inject into downloads."""

    def __init__(self, token: str) -> None:
        self.token = token
        self.repos: dict[str, Repo] = {}
        self.blobs: dict[str, bytes] = {}
        self.lfs: dict[str, bytes] = {}
        self.lock = threading.Lock()
        self.log: list[str] = []
        self.faults: list[Fault] = []
        self.ranges: list[str] = []

    def fault(self, filename: str) -> Fault | None:
        """The next fault for a download of ``filename`` (its count taken down by one)."""
        for fault in self.faults:
            if fault.filename == filename and fault.times > 0:
                fault.times -= 1
                return fault
        return None

    def new_commit(self, repo: Repo, files: dict[str, Entry], message: str) -> Commit:
        oid = hashlib.sha1(f"{repo.repo_id}{time.time_ns()}{len(repo.commits)}".encode()).hexdigest()
        commit = Commit(oid, files, message)
        repo.commits[oid] = commit
        return commit

    def add_file(self, repo_id: str, path: str, data: bytes, *, lfs: bool | None = None,
                 branch: str = "main") -> str:
        """Commit one file directly (to fill a repo for a test without the client)."""
        with self.lock:
            repo = self.repos.setdefault(repo_id, Repo(repo_id, private=False))
            if not repo.branches:
                repo.branches["main"] = self.new_commit(repo, {}, "initial commit").oid
            files = dict(repo.commits[repo.branches[branch]].files)
            files[path] = self._store(path, data, lfs)
            commit = self.new_commit(repo, files, f"add {path}")
            repo.branches[branch] = commit.oid
            return commit.oid

    def _store(self, path: str, data: bytes, lfs: bool | None) -> Entry:
        if lfs is None:
            lfs = goes_to_lfs(path, len(data))
        if lfs:
            sha = hashlib.sha256(data).hexdigest()
            self.lfs[sha] = data
            return Entry(len(data), git_blob_sha1(pointer(sha, len(data))), sha)
        blob = git_blob_sha1(data)
        self.blobs[blob] = data
        return Entry(len(data), blob, None)


def pointer(sha256: str, size: int) -> bytes:
    return (f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\n"
            f"size {size}\n").encode()


def tree_entry(path: str, entry: Entry) -> dict:
    item = {"type": "file", "oid": entry.blob, "size": entry.size, "path": path}
    if entry.lfs:
        item["lfs"] = {"oid": entry.lfs, "size": entry.size,
                       "pointerSize": len(pointer(entry.lfs, entry.size))}
    return item


class Handler(BaseHTTPRequestHandler):
    server: "HubServer"
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args) -> None:  # quiet; kept for assertions
        self.server.state.log.append(f"{self.command} {self.path}")

    # -- plumbing ---------------------------------------------------------------------------
    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None,
              content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(data).encode(), headers)

    def _error(self, status: int, code: str | None, message: str) -> None:
        headers = {"X-Error-Message": message}
        if code:
            headers["X-Error-Code"] = code
        self._json(status, {"error": message}, headers)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _authorised(self) -> bool:
        if self.headers.get("Authorization") == f"Bearer {self.server.state.token}":
            return True
        self._error(401, None, "Invalid credentials in Authorization header")
        return False

    def _whoami(self) -> None:
        """The token's owner, as the Hub answers ``/api/whoami-v2``; 401 for another token."""
        if self._authorised():
            self._json(200, {"type": "user", "name": "alice", "auth": {"type": "access_token",
                             "accessToken": {"role": "write"}}})

    @property
    def base(self) -> str:
        return f"http://{self.server.server_address[0]}:{self.server.server_address[1]}"

    def _repo(self, repo_id: str) -> Repo | None:
        repo = self.server.state.repos.get(repo_id)
        if repo is None or (repo.private and self.headers.get("Authorization")
                            != f"Bearer {self.server.state.token}"):
            self._error(404, "RepoNotFound", "Repository not found")
            return None
        return repo

    def _revision(self, repo_id: str, revision: str) -> tuple[Repo, Commit] | None:
        """The repo and the commit ``revision`` names, or None once a not-found is sent."""
        repo = self._repo(repo_id)
        if repo is None:
            return None
        commit = repo.resolve(revision)
        if commit is None:
            self._error(404, "RevisionNotFound", f"Invalid rev id: {revision}")
            return None
        return repo, commit

    # -- routes -----------------------------------------------------------------------------
    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        path, query = unquote(url.path), parse_qs(url.query)
        with self.server.state.lock:
            if path == "/api/whoami-v2":
                return self._whoami()
            if m := re.fullmatch(r"/api/models/([^/]+/[^/]+?)(?:/revision/(.+))?", path):
                return self._repo_info(m.group(1), m.group(2) or "main")
            if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/tree/([^/]+)(/.*)?", path):
                return self._tree(m.group(1), m.group(2), (m.group(3) or "").strip("/"), query)
            if m := re.fullmatch(r"/([^/]+/[^/]+)/resolve/([^/]+)/(.+)", path):
                return self._resolve(m.group(1), m.group(2), m.group(3))
        self._error(404, None, f"no route for GET {path}")

    def do_POST(self) -> None:
        path = unquote(urlsplit(self.path).path)
        body = self._body()
        with self.server.state.lock:
            if path == "/api/repos/create":
                return self._create_repo(json.loads(body))
            if path == "/api/validate-yaml":
                return self._validate_yaml(json.loads(body)["content"])
            if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/preupload/(.+)", path):
                return self._preupload(m.group(1), m.group(2), json.loads(body))
            if m := re.fullmatch(r"/([^/]+/[^/]+)\.git/info/lfs/objects/batch", path):
                return self._lfs_batch(m.group(1), json.loads(body))
            if m := re.fullmatch(r"/lfs-verify/([0-9a-f]{64})", path):
                data = self.server.state.lfs.get(m.group(1))
                if data is None or json.loads(body).get("size") != len(data):
                    return self._error(422, None, "LFS object missing or of another size")
                return self._json(200, {"success": True})
            if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/paths-info/(.+)", path):
                return self._paths_info(m.group(1), m.group(2), body)
            if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/commit/(.+)", path):
                return self._commit_files(m.group(1), m.group(2), body)
            if m := re.fullmatch(r"/api/models/([^/]+/[^/]+)/(branch|tag)/(.+)", path):
                return self._ref(m.group(1), m.group(2), m.group(3), json.loads(body or b"{}"))
        self._error(404, None, f"no route for POST {path}")

    def do_PUT(self) -> None:
        path = unquote(urlsplit(self.path).path)
        body = self._body()
        m = re.fullmatch(r"/lfs-upload/([0-9a-f]{64})", path)
        if not m:
            return self._error(404, None, f"no route for PUT {path}")
        if hashlib.sha256(body).hexdigest() != m.group(1):
            return self._error(400, None, "uploaded content does not match its sha256")
        with self.server.state.lock:
            self.server.state.lfs[m.group(1)] = body
        self._send(200)

    # -- API --------------------------------------------------------------------------------
    def _create_repo(self, payload: dict) -> None:
        if not self._authorised():
            return
        repo_id = f"{payload['organization']}/{payload['name']}" if payload.get(
            "organization") else payload["name"]
        if "/" not in repo_id:
            return self._error(400, None, "repo id needs a namespace in this server")
        state = self.server.state
        if repo_id in state.repos:  # the Hub answers 409 with the url of the existing repo
            return self._json(409, {"error": "You already created this model repo",
                                    "url": f"{self.base}/{repo_id}"},
                              {"X-Error-Message": "You already created this model repo"})
        repo = Repo(repo_id, private=payload.get("visibility") == "private")
        repo.branches["main"] = state.new_commit(repo, {}, "initial commit").oid
        state.repos[repo_id] = repo
        self._json(200, {"url": f"{self.base}/{repo_id}", "name": repo_id})

    def _validate_yaml(self, content: str) -> None:
        """The model card's metadata header: YAML front matter holding a mapping."""
        match = re.match(r"^---\n(.*?)\n---\n", content, re.S)
        try:
            meta = yaml.safe_load(match.group(1)) if match else {}
        except yaml.YAMLError as exc:
            return self._json(400, {"errors": [{"message": f"invalid YAML: {exc}"}]})
        errors = [] if isinstance(meta, dict) else [{"message": "metadata must be a mapping"}]
        for key in ("tags", "datasets", "metrics"):
            if isinstance(meta, dict) and key in meta and not isinstance(meta[key], (list, str)):
                errors.append({"message": f"{key} must be a list of strings"})
        warnings = [] if meta else [{"message": "empty or missing yaml metadata"}]
        self._json(400 if errors else 200, {"errors": errors, "warnings": warnings})

    def _repo_info(self, repo_id: str, revision: str) -> None:
        found = self._revision(repo_id, revision)
        if found is None:
            return
        repo, commit = found
        self._json(200, {
            "id": repo_id, "modelId": repo_id, "sha": commit.oid, "private": repo.private,
            "siblings": [{"rfilename": p} for p in sorted(commit.files)],
            "tags": [], "downloads": 0, "likes": 0,
        })

    def _tree(self, repo_id: str, revision: str, prefix: str, query: dict) -> None:
        found = self._revision(repo_id, revision)
        if found is None:
            return
        repo, commit = found
        recursive = query.get("recursive", ["false"])[0].lower() in ("1", "true")
        entries, folders = [], set()
        for path, entry in sorted(commit.files.items()):
            if prefix and not path.startswith(prefix + "/"):
                continue
            rest = path[len(prefix) + 1:] if prefix else path
            if "/" in rest and not recursive:
                folders.add(f"{prefix}/{rest.split('/')[0]}".strip("/"))
                continue
            entries.append(tree_entry(path, entry))
        entries += [{"type": "directory", "oid": "0" * 40, "size": 0, "path": f}
                    for f in sorted(folders)]
        self._json(200, entries)

    def _paths_info(self, repo_id: str, revision: str, body: bytes) -> None:
        found = self._revision(repo_id, revision)
        if found is None:
            return
        repo, commit = found
        if self.headers.get("Content-Type", "").startswith("application/json"):
            paths = json.loads(body).get("paths", [])
        else:
            paths = parse_qs(body.decode()).get("paths", [])
        paths = [paths] if isinstance(paths, str) else paths
        self._json(200, [tree_entry(p, commit.files[p]) for p in paths if p in commit.files])

    def _resolve(self, repo_id: str, revision: str, filename: str) -> None:
        found = self._revision(repo_id, revision)
        if found is None:
            return
        repo, commit = found
        entry = commit.files.get(filename)
        if entry is None:
            return self._error(404, "EntryNotFound", f"{filename} does not exist on {revision}",)
        state = self.server.state
        data = state.lfs[entry.lfs] if entry.lfs else state.blobs[entry.blob]
        headers = {"X-Repo-Commit": commit.oid, "ETag": f'"{entry.blob}"'}
        if entry.lfs:
            headers.update({"X-Linked-Etag": f'"{entry.lfs}"', "X-Linked-Size": str(entry.size)})
        fault = state.fault(filename) if self.command == "GET" else None
        if fault is not None:
            return self._faulty(fault, data, headers)
        status, start = 200, 0
        if self.command == "GET" and (m := re.fullmatch(r"bytes=(\d+)-", self.headers.get(
                "Range", ""))):
            start, status = int(m.group(1)), 206
            state.ranges.append(f"{filename} from {start}")
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        self._send(status, data[start:], headers, content_type="application/octet-stream")

    def _faulty(self, fault: Fault, data: bytes, headers: dict[str, str]) -> None:
        if fault.kind == "status":
            return self._error(fault.status, None, "injected fault")
        if fault.kind == "slow":
            self.server.state.lock.release()  # let other requests through while waiting
            try:
                time.sleep(fault.seconds)
            finally:
                self.server.state.lock.acquire()
            return self._send(200, data, headers, content_type="application/octet-stream")
        if fault.kind == "flip":
            middle = len(data) // 2
            flipped = data[:middle] + bytes(b ^ 0xFF for b in data[middle:middle + 64])
            return self._send(200, flipped + data[middle + 64:], headers,
                              content_type="application/octet-stream")
        assert fault.kind == "cut", fault
        self.send_response(200)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(data)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.close_connection = True
        self.connection.shutdown(socket.SHUT_RDWR)

    def _preupload(self, repo_id: str, revision: str, payload: dict) -> None:
        if not self._authorised():
            return
        found = self._revision(repo_id, revision)
        if found is None:
            return
        repo, commit = found
        files = []
        for f in payload["files"]:
            lfs = goes_to_lfs(f["path"], f["size"])
            existing = commit.files.get(f["path"])
            files.append({"path": f["path"], "uploadMode": "lfs" if lfs else "regular",
                          "shouldIgnore": False, "oid": existing.blob if existing else None})
        self._json(200, {"files": files, "commitOid": commit.oid})

    def _lfs_batch(self, repo_id: str, payload: dict) -> None:
        if not self._authorised() or self._repo(repo_id) is None:
            return
        objects = []
        for obj in payload["objects"]:
            item = {"oid": obj["oid"], "size": obj["size"], "authenticated": True}
            if obj["oid"] not in self.server.state.lfs:
                item["actions"] = {
                    "upload": {"href": f"{self.base}/lfs-upload/{obj['oid']}"},
                    "verify": {"href": f"{self.base}/lfs-verify/{obj['oid']}"},
                }
            objects.append(item)
        self._json(200, {"transfer": "basic", "objects": objects})

    def _commit_files(self, repo_id: str, revision: str, body: bytes) -> None:
        if not self._authorised():
            return
        found = self._revision(repo_id, revision)
        if found is None:
            return
        repo, parent = found
        revision = unquote(revision)
        if revision not in repo.branches:
            return self._error(400, None, f"cannot commit to {revision}: not a branch")
        state = self.server.state
        files = dict(parent.files)
        message = ""
        for line in body.splitlines():
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                message = value.get("summary", "")
                if value.get("parentCommit") not in (None, parent.oid):
                    return self._error(412, None, "A commit has happened since parentCommit")
            elif key == "file":
                data = base64.b64decode(value["content"])
                files[value["path"]] = state._store(value["path"], data, lfs=False)
            elif key == "lfsFile":
                data = state.lfs.get(value["oid"])
                if data is None:
                    return self._error(422, None, f"LFS object {value['oid']} was never uploaded")
                files[value["path"]] = Entry(len(data), git_blob_sha1(pointer(value["oid"],
                                                                              len(data))),
                                             value["oid"])
            elif key in ("deletedFile", "deletedFolder"):
                doomed = [p for p in files if p == value["path"]
                          or p.startswith(value["path"].rstrip("/") + "/")]
                if not doomed:
                    return self._error(404, "EntryNotFound", f"{value['path']} does not exist")
                for p in doomed:
                    del files[p]
            else:
                return self._error(400, None, f"commit operation {key!r} is not supported here")
        commit = state.new_commit(repo, files, message)
        repo.branches[revision] = commit.oid
        self._json(200, {"success": True, "commitOid": commit.oid,
                         "commitUrl": f"{self.base}/{repo_id}/commit/{commit.oid}",
                         "pullRequestUrl": None})

    def _ref(self, repo_id: str, kind: str, name: str, payload: dict) -> None:
        if not self._authorised():
            return
        repo = self._repo(repo_id)
        if repo is None:
            return
        name = unquote(name)
        if kind == "branch":
            if name in repo.branches:
                return self._error(409, None, f"Branch {name} already exists")
            start = repo.resolve(payload.get("startingPoint") or "main")
            repo.branches[name] = start.oid
        else:  # a tag on revision ``name`` named payload["tag"]
            commit = repo.resolve(name)
            if commit is None:
                return self._error(404, "RevisionNotFound", f"Invalid rev id: {name}")
            if payload["tag"] in repo.tags:
                return self._error(409, None, f"Tag {payload['tag']} already exists")
            repo.tags[payload["tag"]] = commit.oid
        self._json(200, {})


class HubServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, token: str = "hf_zoo_test_token", port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), Handler)
        self.state = HubState(token)
        self.thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def start(self) -> "HubServer":
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()
        return self

    def handle_error(self, request, client_address) -> None:
        """A client that hangs up (a timeout the test provoked) is no failure of ours."""
        self.state.log.append(f"client {client_address} hung up")

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


if __name__ == "__main__":
    server = HubServer(port=8765)
    print(f"Hub test server on {server.url} (token {server.state.token})")
    server.serve_forever()
