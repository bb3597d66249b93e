"""Real servers on loopback for the remote tests and benches: moto's S3 API server, an HTTP file
server, and a TCP proxy that throttles the link to either (issue 40: a slow network).

Nothing here reaches any address but 127.0.0.1. The S3 server is a session fixture (`s3`): it
sets the AWS_* environment (test credentials, AWS_ENDPOINT_URL) that s3fs, the CLI and any
subprocess then use, exactly as a user's AWS configuration would be used."""

from __future__ import annotations

import contextlib
import functools
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

BUCKET = "prep-test"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def moto_s3() -> Iterator[str]:
    """moto's S3 server on 127.0.0.1:PORT, the AWS_* environment pointing at it (restored after);
    yields its endpoint URL."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # moto's request log
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
        yield env["AWS_ENDPOINT_URL"]
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture(scope="session", name="s3")
def s3_server() -> Iterator[Any]:
    """moto's S3 server on 127.0.0.1:PORT with bucket BUCKET; yields an s3fs file system."""
    pytest.importorskip("moto")
    s3fs = pytest.importorskip("s3fs")
    with moto_s3():
        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        fs.mkdir(BUCKET)
        yield fs


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


class TokenBucket:
    """`rate` bytes a second on average, in bursts of at most `burst` bytes. `take(n)` returns
    the seconds to wait before sending n bytes: the bucket goes into debt and the sender pays it
    by waiting, so a sender that oversleeps loses nothing (the refill catches up, up to `burst`).
    One bucket shared by every connection: the link's rate, not each stream's."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self.tokens, self.last = float(burst), clock()
        self.lock = threading.Lock()

    def take(self, n: int) -> float:
        with self.lock:
            now = self.clock()
            refilled = self.tokens + (now - self.last) * self.rate
            self.tokens, self.last = min(float(self.burst), refilled) - n, now
            return max(0.0, -self.tokens / self.rate)


class Proxy:
    """Forwards each connection to 127.0.0.1:`target`; counts the bytes each way (`down`: server
    to client, `up`: client to server) and sends `down` through `bucket` (None: unthrottled)."""

    CHUNK = 16 << 10  # bytes a read: small, so a throttled stream flows evenly

    def __init__(self, target: int, bucket: TokenBucket | None) -> None:
        self.target, self.bucket = target, bucket
        self.down = self.up = 0
        self.lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.open: set[socket.socket] = set()  # closed when the proxy stops
        self.stopped = threading.Event()

    def serve(self) -> None:
        self.listener.settimeout(0.05)  # a closed socket does not wake accept(): look at stopped
        while not self.stopped.is_set():
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            client.settimeout(None)
            threading.Thread(target=self._connection, args=(client,), daemon=True).start()

    def _connection(self, client: socket.socket) -> None:
        with client:
            try:
                server = socket.create_connection(("127.0.0.1", self.target))
            except OSError:  # the server is down: the client sees its connection closed
                return
            self._forward(client, server)

    def _forward(self, client: socket.socket, server: socket.socket) -> None:
        with server:
            with self.lock:
                self.open |= {client, server}
            up = threading.Thread(target=self._pump, args=(client, server, False), daemon=True)
            up.start()
            self._pump(server, client, True)
            up.join()
            with self.lock:
                self.open -= {client, server}

    def _pump(self, src: socket.socket, dst: socket.socket, down: bool) -> None:
        try:
            while data := src.recv(self.CHUNK):
                if down and self.bucket is not None:
                    time.sleep(self.bucket.take(len(data)))
                dst.sendall(data)
                with self.lock:
                    if down:
                        self.down += len(data)
                    else:
                        self.up += len(data)
            dst.shutdown(socket.SHUT_WR)  # pass the end of the stream on: HTTP may close it
        except OSError:  # a side reset or closed the connection (or the proxy stopped)
            pass

    def stop(self) -> None:
        self.stopped.set()
        with self.lock:
            for sock in self.open:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def throttled(target: int, rate: float | None, burst: int = 64 << 10) -> Iterator[Proxy]:
    """A proxy on 127.0.0.1:PORT to the server on `target`, `rate` bytes a second from server to
    client (None: as fast as it goes); yields it (`url`, and the `down` and `up` byte counts).
    Point a client at `proxy.url`: s3fs with storage_options={"endpoint_url": proxy.url}."""
    proxy = Proxy(target, TokenBucket(rate, burst) if rate else None)
    thread = threading.Thread(target=proxy.serve, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.stop()
        thread.join()
        proxy.listener.close()
