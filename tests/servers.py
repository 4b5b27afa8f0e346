"""Local servers for the remote-archive tests: a range-capable HTTP server over a directory
(counting requests and bytes) and moto's S3 server, both on 127.0.0.1."""

from __future__ import annotations

import email.utils
import hashlib
import os
import re
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class _Handler(SimpleHTTPRequestHandler):
    server: RangeHTTPServer

    def log_message(self, *args) -> None:  # quiet
        pass

    def _count(self, n: int) -> None:
        with self.server.lock:
            self.server.requests += 1
            self.server.bytes_sent += n
            path = self.path.split("?")[0]
            self.server.per_path[path] = self.server.per_path.get(path, 0) + n
            self.server.requests_per_path[path] = self.server.requests_per_path.get(path, 0) + 1

    def _target(self) -> Path | None:
        rel = self.path.split("?")[0].lstrip("/")
        if rel in self.server.status:
            return None
        p = (self.server.root / rel).resolve()
        if not str(p).startswith(str(self.server.root.resolve())) or not p.is_file():
            return None
        return p

    def _headers(self, p: Path, code: int, length: int, extra: dict | None = None) -> None:
        st = p.stat()
        self.send_response(code)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("ETag", '"%s"' % hashlib.md5(f"{st.st_size}-{st.st_mtime_ns}".encode()).hexdigest())
        self.send_header("Last-Modified", email.utils.formatdate(st.st_mtime, usegmt=True))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()

    def _refuse(self) -> bool:
        rel = self.path.split("?")[0].lstrip("/")
        code = self.server.status.get(rel)
        if any(self.headers.get(k) != v for k, v in self.server.required_headers.items()):
            code = 403  # a header the server wants (a token) is missing
        with self.server.lock:
            if self.server.flaky.get(rel, 0) > 0:  # a transient failure
                self.server.flaky[rel] -= 1
                code = 503
        if code is None and self._target() is None:
            code = 404
        if code is None:
            return False
        self._count(0)
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()
        return True

    def _listing(self) -> bool:
        """A directory's index page (links to its entries, as a web server's autoindex
        gives them), when `listing` is on."""
        rel = self.path.split("?")[0].lstrip("/")
        d = (self.server.root / rel).resolve()
        if not str(d).startswith(str(self.server.root.resolve())) or not d.is_dir():
            return False
        names = sorted(p.name + ("/" if p.is_dir() else "") for p in d.iterdir())
        body = "".join(f'<a href="{n}">{n}</a>\n' for n in names).encode()
        self._count(len(body))
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        return True

    def do_HEAD(self) -> None:  # noqa: N802
        if self._refuse():
            return
        p = self._target()
        self._count(0)
        self._headers(p, 200, p.stat().st_size)

    def do_GET(self) -> None:  # noqa: N802
        if self.server.listing and self._listing():
            return
        if self._refuse():
            return
        p = self._target()
        size = p.stat().st_size
        rng = self.headers.get("Range")
        m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng or "")
        if m is None:
            data = p.read_bytes()
            self._headers(p, 200, len(data))
        else:
            a, b = m.groups()
            if a == "":
                start, end = max(0, size - int(b)), size - 1
            else:
                start, end = int(a), min(int(b) if b else size - 1, size - 1)
            if start >= size:
                self._count(0)
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{size}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            with open(p, "rb") as f:
                data = os.pread(f.fileno(), end - start + 1, start)
            self._headers(p, 206, len(data), {"Content-Range": f"bytes {start}-{end}/{size}"})
        self._count(len(data))  # before sending: a client that has the answer sees it counted
        self.wfile.write(data)


class RangeHTTPServer(ThreadingHTTPServer):
    """Serves `root` on 127.0.0.1 with Range requests; `status` maps a path to a forced
    status code (403, ...), `flaky` a number of 503 answers before it serves,
    `required_headers` headers every request must carry (else 403), `listing` index pages
    of directories (else they are 404); counts
    requests and bytes (per path too)."""

    daemon_threads = True

    def __init__(self, root: str | os.PathLike):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.root = Path(root)
        self.lock = threading.Lock()
        self.status: dict[str, int] = {}
        self.flaky: dict[str, int] = {}  # path -> how many requests answer 503 first
        self.required_headers: dict[str, str] = {}  # else 403 (a token the client must send)
        self.listing = False  # directories answer with an index page (a tree to walk)
        self.reset()
        self.thread = threading.Thread(target=self.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def reset(self) -> None:
        self.requests = 0
        self.bytes_sent = 0
        self.per_path: dict[str, int] = {}
        self.requests_per_path: dict[str, int] = {}

    def stop(self) -> None:
        self.shutdown()
        self.server_close()


def start_moto():
    """moto's S3 server on 127.0.0.1 (a free port): (server, endpoint URL)."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    return server, f"http://{host}:{port}"


def s3_bucket(mp, endpoint: str, bucket: str):
    """A boto3 client of the moto server at `endpoint` with `bucket` made, the AWS_*
    environment set on the pytest MonkeyPatch `mp` (`s3_env`)."""
    import boto3

    s3_env(mp, endpoint)
    client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    client.create_bucket(Bucket=bucket)
    return client


def s3_env(mp, endpoint: str) -> None:
    """The AWS_* environment of a client of the moto server at `endpoint`, set on the
    pytest MonkeyPatch `mp` (undone with it)."""
    mp.setenv("AWS_ENDPOINT_URL", endpoint)
    mp.setenv("AWS_ACCESS_KEY_ID", "testing")
    mp.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    mp.setenv("AWS_REGION", "us-east-1")
    mp.delenv("AWS_PROFILE", raising=False)
