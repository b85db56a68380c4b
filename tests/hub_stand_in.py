"""A stand-in for the Hugging Face Hub: a test double, for the tests alone, of a service this machine cannot reach.

An HTTP server on 127.0.0.1 (`StandInHub`, started by the `stand_in_hub` fixture of `conftest.py`) answering the
routes that huggingface_hub's upload (`create_repo`, `upload_folder`, `create_commit`, `push_to_hub`) and
transformers' loading by id (`from_pretrained`, `pipeline`, remote code) take, as the Hub answers them:

- `POST /api/repos/create`: a repository (409 where it exists, which `exist_ok=True` accepts);
- `POST /api/validate-yaml`: a model card's metadata, always valid;
- `POST /api/models/{repo}/preupload/{revision}`: every file is to be sent as a regular upload, inside the commit, so
  that neither LFS nor Xet storage is needed;
- `POST /api/models/{repo}/commit/{revision}`: the NDJSON commit (a header line, then one line per file added in
  base64 or deleted), which replaces the repository's files and gives it a new commit id;
- `GET /api/models/{repo}[/revision/{revision}]`: the model's info (id, commit, files);
- `GET /api/models/{repo}/tree/{revision}[/{folder}]`: the files and folders of a folder (all below it with
  `recursive`);
- `HEAD` and `GET /{repo}/resolve/{revision}/{path}`: a file, with the headers `hf_hub_download` reads
  (`X-Repo-Commit`, `ETag`: the file's git blob id, `Content-Length`); a file that is absent is 404 with
  `X-Error-Code: EntryNotFound`, a repository that is absent `RepoNotFound`, a revision `RevisionNotFound`.

A repository keeps its latest commit alone: its revisions are `main` and that commit's id. Any other route is 404
with no error code, named in the message. Tokens are not checked.
"""

import base64
import hashlib
import json
import re
import shutil
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REPO = r"(?P<repo>[^/]+/[^/]+)"
REVISION = r"(?P<revision>[^/]+)"
ROUTES = [  # (method, path pattern, handler method name); the query string is matched apart
    ("POST", r"/api/repos/create", "create_repo"),
    ("POST", r"/api/validate-yaml", "validate_yaml"),
    ("POST", rf"/api/models/{REPO}/preupload/{REVISION}", "preupload"),
    ("POST", rf"/api/models/{REPO}/commit/{REVISION}", "commit"),
    ("GET", rf"/api/models/{REPO}(?:/revision/{REVISION})?", "model_info"),
    ("GET", rf"/api/models/{REPO}/tree/{REVISION}(?:/(?P<folder>.+))?", "tree"),
    ("GET", rf"/{REPO}/resolve/{REVISION}/(?P<path>.+)", "resolve"),
    ("HEAD", rf"/{REPO}/resolve/{REVISION}/(?P<path>.+)", "resolve"),
]


def git_blob_id(content: bytes) -> str:
    """The id git gives a file of `content`, which the Hub gives as a regular file's `ETag` and `oid`."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


class HubError(Exception):
    """An answer other than 200: its status, the Hub's `X-Error-Code` (None for none), message, the repository's
    commit (`X-Repo-Commit`) where there is one, and any other fields of the JSON answer."""

    def __init__(self, status: int, error_code: str | None, message: str, commit: str | None = None, **fields):
        super().__init__(message)
        self.status, self.error_code, self.commit, self.fields = status, error_code, commit, fields


class StandInHub:
    """The server, its repositories under `root/{namespace}/{name}`, and `endpoint`, its URL for `HF_ENDPOINT`;
    `requests` records each request as `"METHOD /path"`, in order, and `private` the repositories made private."""

    def __init__(self, root: Path):
        self.root = root
        self.commits: dict[str, str] = {}  # repository id -> its latest commit id
        self.requests: list[str] = []
        self.private: set[str] = set()
        self.lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self.handler_class())
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> "StandInHub":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join()

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                hub.answer(self, "GET")

            def do_HEAD(self):
                hub.answer(self, "HEAD")

            def do_POST(self):
                hub.answer(self, "POST")

            def log_message(self, format, *args):  # the tests read `requests` instead of stderr
                pass

        return Handler

    def answer(self, request: BaseHTTPRequestHandler, method: str) -> None:
        """Routes one request, then sends the route's JSON or bytes, or its error, with the Hub's headers."""
        url = urllib.parse.urlsplit(request.path)
        path, query = urllib.parse.unquote(url.path), urllib.parse.parse_qs(url.query)
        body = request.rfile.read(int(request.headers.get("Content-Length") or 0))
        self.requests.append(f"{method} {url.path}")
        headers: dict[str, str] = {}
        try:
            name, match = self.route(method, path)
            with self.lock:
                content = getattr(self, name)(body=body, query=query, headers=headers, **match.groupdict())
            status = 200
        except HubError as error:
            status, content = error.status, {"error": str(error), **error.fields}
            if error.error_code:
                headers["X-Error-Code"] = error.error_code
            if error.commit:
                headers["X-Repo-Commit"] = error.commit
        if not isinstance(content, bytes):
            content, headers["Content-Type"] = json.dumps(content).encode(), "application/json"
        request.send_response(status)
        for key, value in {**headers, "Content-Length": str(len(content))}.items():
            request.send_header(key, value)
        request.end_headers()
        if method != "HEAD":
            request.wfile.write(content)

    @staticmethod
    def route(method: str, path: str) -> tuple[str, re.Match]:
        """The name of the method answering `method path`, and the match of its pattern (the path's fields)."""
        for verb, pattern, name in ROUTES:
            if verb == method and (match := re.fullmatch(pattern, path)):
                return name, match
        raise HubError(404, None, f"{method} {path} is not a route the stand-in Hub answers")

    def folder(self, repo: str, revision: str | None = None) -> Path:
        """The files of `repo` at `revision` (its latest commit alone); a `HubError` where either is unknown."""
        if repo not in self.commits:
            raise HubError(404, "RepoNotFound", f"Repository not found: {repo}")
        if revision not in (None, "main", self.commits[repo]):
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}", self.commits[repo])
        return self.root / repo

    def files(self, repo: str, revision: str | None = None) -> list[Path]:
        folder = self.folder(repo, revision)
        return sorted(file for file in folder.rglob("*") if file.is_file())

    def create_repo(self, body, **_):
        request = json.loads(body)
        repo = f"{request['organization']}/{request['name']}" if request.get("organization") else request["name"]
        if "/" not in repo:
            raise HubError(400, None, f"the stand-in Hub takes a namespace in the repository id: {repo}")
        if repo in self.commits:  # `create_repo(exist_ok=True)` reads the URL of the repository there
            raise HubError(409, None, "You already created this model repo", url=f"{self.endpoint}/{repo}")
        (self.root / repo).mkdir(parents=True)
        self.commits[repo] = hashlib.sha1(repo.encode()).hexdigest()
        if request.get("visibility") == "private":
            self.private.add(repo)
        return {"url": f"{self.endpoint}/{repo}", "name": repo}

    def validate_yaml(self, **_):
        return {"errors": [], "warnings": []}

    def preupload(self, repo, revision, body, **_):
        self.folder(repo, revision)
        files = json.loads(body)["files"]
        return {"files": [{"path": file["path"], "uploadMode": "regular", "shouldIgnore": False} for file in files]}

    def commit(self, repo, revision, body, **_):
        folder = self.folder(repo, revision)
        lines = [json.loads(line) for line in body.splitlines() if line.strip()]
        for line in lines[1:]:  # the first is the header: the commit's message
            target = folder / line["value"]["path"]
            if line["key"] == "file":
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(base64.b64decode(line["value"]["content"]))
            elif line["key"] == "deletedFile":
                target.unlink()
            elif line["key"] == "deletedFolder":
                shutil.rmtree(target)
            else:
                raise HubError(400, None, f"the stand-in Hub takes regular files alone, not {line['key']}")
        self.commits[repo] = hashlib.sha1(self.commits[repo].encode() + body).hexdigest()
        return {"commitUrl": f"{self.endpoint}/{repo}/commit/{self.commits[repo]}", "commitOid": self.commits[repo]}

    def model_info(self, repo, revision=None, **_):
        folder = self.folder(repo, revision)
        siblings = [{"rfilename": file.relative_to(folder).as_posix()} for file in self.files(repo)]
        return {
            "id": repo,
            "modelId": repo,
            "sha": self.commits[repo],
            "private": repo in self.private,
            "siblings": siblings,
        }

    def tree(self, repo, revision, query, folder=None, **_):
        root = self.folder(repo, revision)
        base = root / folder if folder else root
        if not base.is_dir():
            raise HubError(404, "EntryNotFound", f"{folder} does not exist on {revision}", self.commits[repo])
        entries = base.rglob("*") if query.get("recursive", ["false"])[0].lower() == "true" else base.iterdir()
        # huggingface_hub's `RepoFolder` requires a folder's `oid`, which neither client reads: any id does.
        return [
            {
                "type": "file",
                "path": entry.relative_to(root).as_posix(),
                "size": entry.stat().st_size,
                "oid": git_blob_id(entry.read_bytes()),
            }
            if entry.is_file()
            else {"type": "directory", "path": entry.relative_to(root).as_posix(), "oid": git_blob_id(b"")}
            for entry in sorted(entries)
        ]

    def resolve(self, repo, revision, path, headers, **_):
        file = self.folder(repo, revision) / path
        headers["X-Repo-Commit"] = self.commits[repo]
        if not file.is_file():
            raise HubError(404, "EntryNotFound", f"{path} does not exist on {revision}", self.commits[repo])
        content = file.read_bytes()
        headers["ETag"] = f'"{git_blob_id(content)}"'
        return content
