"""Real servers on loopback for the remote tests: moto's S3 API server and an HTTP file server.

Nothing here reaches any address but 127.0.0.1. The S3 server is a session fixture (`s3`): it
sets the AWS_* environment (test credentials, AWS_ENDPOINT_URL) that s3fs, the CLI and any
subprocess then use, exactly as a user's AWS configuration would be used."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

BUCKET = "prep-test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session", name="s3")
def s3_server() -> Iterator[Any]:
    """moto's S3 server on 127.0.0.1:PORT with bucket BUCKET; yields an s3fs file system."""
    pytest.importorskip("moto")
    s3fs = pytest.importorskip("s3fs")
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    env = {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}",
    }
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        fs.mkdir(BUCKET)
        yield fs
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class CountingHandler(SimpleHTTPRequestHandler):
    """Serves a folder; counts the GETs that start reading a file (no Range, or from byte 0)."""

    starts: Counter[str]

    def do_GET(self) -> None:
        rng = self.headers.get("Range", "")
        if not rng or rng.startswith("bytes=0-"):
            self.starts[self.path.lstrip("/")] += 1
        super().do_GET()

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextlib.contextmanager
def http_server(folder: Path) -> Iterator[tuple[str, Counter[str]]]:
    """`folder` served on http://127.0.0.1:PORT; yields the URL and the per-file GET counts."""
    starts: Counter[str] = Counter()
    handler = type("Handler", (CountingHandler,), {"starts": starts})
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=folder))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", starts
    finally:
        server.shutdown()
        server.server_close()
