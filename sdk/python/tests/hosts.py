"""Real aep hosts for the tests: the binary named by $AEP_BIN (.ci/run
builds it), else one built here with `go build` from this checkout. An HTTP
host (`aep serve --listen 127.0.0.1:<free port>`) serves HTTP+SSE, the
single exchange and WebSocket; stdio clients spawn `aep serve --stdio` each.

The SDK itself needs only the standard library and pydantic for every
transport. The websockets package is what the benchmarks' floor and the
tests' scripted WebSocket peers are measured against elsewhere; it is not
needed here.
"""

from __future__ import annotations

import atexit
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import unittest
from typing import Any, Callable, Optional

HERE = os.path.dirname(os.path.abspath(__file__))
SDK = os.path.dirname(HERE)
ROOT = os.path.dirname(os.path.dirname(SDK))
if SDK not in sys.path:
    sys.path.insert(0, SDK)

import aep  # noqa: E402

TOKEN = "py-sdk-test-token-0123456789"
ALL_CAPS = ["tools", "memory", "env", "toolkits"]

_bin: Optional[str] = None


def binary() -> str:
    global _bin
    if _bin is None:
        _bin = os.environ.get("AEP_BIN")
        if not _bin:
            d = tempfile.mkdtemp(prefix="aep-py-bin-")
            atexit.register(shutil.rmtree, d, True)
            _bin = os.path.join(d, "aep")
            subprocess.run(["go", "build", "-o", _bin, "./cmd/aep"], cwd=ROOT, check=True)
    return _bin


def have_websockets() -> bool:
    """Always: the WebSocket transport is the SDK's own (aep/_ws.py). Kept
    for the tests that asked."""
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HTTPHost:
    """`aep serve` on a free loopback port with a fresh data directory;
    config, when given, is its configuration file."""

    def __init__(self, config: Optional[str] = None) -> None:
        self.data = tempfile.mkdtemp(prefix="aep-py-data-")
        self.log = open(os.path.join(self.data, "host.log"), "wb")
        extra: list[str] = []
        if config is not None:
            path = os.path.join(self.data, "aep.yaml")
            with open(path, "w") as f:
                f.write(config)
            extra = ["--config", path]
        for _ in range(5):
            self.port = _free_port()
            self.proc = subprocess.Popen(
                [binary(), "serve", "--listen", f"127.0.0.1:{self.port}", "--data-dir", self.data, *extra],
                env={"PATH": os.environ.get("PATH", ""), "HOME": self.data, "AEP_AUTH_TOKEN": TOKEN},
                stdout=self.log, stderr=self.log, cwd=self.data)
            if self._ready():
                return
            self.proc.kill()
            self.proc.wait()
        raise RuntimeError(f"aep serve did not become ready:\n{self.stderr()}")

    def _ready(self) -> bool:
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return False  # e.g. the port was taken between probe and bind
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1) as r:
                    if r.status == 200:
                        return True
            except OSError:
                time.sleep(0.05)
        return False

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def stderr(self) -> str:
        self.log.flush()
        with open(os.path.join(self.data, "host.log"), "rb") as f:
            return f.read().decode(errors="replace")[-4000:]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.data, ignore_errors=True)


class StdioFactory:
    """Spawns `aep serve --stdio`, each with its own data directory."""

    def __init__(self) -> None:
        self.root = tempfile.mkdtemp(prefix="aep-py-stdio-")
        self.n = 0

    def args(self) -> dict[str, Any]:
        self.n += 1
        data = os.path.join(self.root, str(self.n))
        os.makedirs(data)
        return dict(argv=[binary(), "serve", "--stdio", "--data-dir", data],
                    env={"PATH": os.environ.get("PATH", ""), "HOME": data, "AEP_AUTH_TOKEN": TOKEN},
                    cwd=data, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


_http: Optional[HTTPHost] = None
_stdio: Optional[StdioFactory] = None


def http_host() -> HTTPHost:
    global _http
    if _http is None:
        _http = HTTPHost()
        atexit.register(_http.stop)
    return _http


def stdio_factory() -> StdioFactory:
    global _stdio
    if _stdio is None:
        _stdio = StdioFactory()
        atexit.register(_stdio.stop)
    return _stdio


TRANSPORTS = ["stdio", "http", "websocket", "exchange"]


def skip_unless_transport(tc: unittest.TestCase, name: str) -> None:
    if name not in TRANSPORTS:
        tc.skipTest(f"no transport {name!r}")


def sync_client(name: str, caps: Optional[list[str]] = None, token: str = TOKEN, **kw: Any) -> aep.Client:
    caps = ALL_CAPS if caps is None else caps
    if name == "stdio":
        return aep.Client.stdio(token=token, caps=caps, **stdio_factory().args(), **kw)
    if name == "http":
        return aep.Client.http(http_host().url, token=token, caps=caps, **kw)
    if name == "websocket":
        return aep.Client.websocket(http_host().ws_url, token=token, caps=caps, **kw)
    if name == "exchange":
        return aep.Client.exchange(http_host().url, token=token, caps=caps, **kw)
    raise ValueError(name)


async def async_client(name: str, caps: Optional[list[str]] = None, token: str = TOKEN, **kw: Any) -> aep.AsyncClient:
    caps = ALL_CAPS if caps is None else caps
    if name == "stdio":
        return await aep.AsyncClient.stdio(token=token, caps=caps, **stdio_factory().args(), **kw)
    if name == "http":
        return await aep.AsyncClient.http(http_host().url, token=token, caps=caps, **kw)
    if name == "websocket":
        return await aep.AsyncClient.websocket(http_host().ws_url, token=token, caps=caps, **kw)
    if name == "exchange":
        return await aep.AsyncClient.exchange(http_host().url, token=token, caps=caps, **kw)
    raise ValueError(name)


class PerTransport:
    """Mixin: the test class runs against the transport named by its
    ``transport`` attribute; concrete classes are made by ``per_transport``."""

    transport = ""

    def setUp(self) -> None:  # noqa: D401
        skip_unless_transport(self, self.transport)  # type: ignore[arg-type]
        super().setUp()  # type: ignore[misc]


def per_transport(base: type, namespace: dict[str, Any]) -> None:
    """Defines ``<Base>Stdio``, ``<Base>Http``, ``<Base>Websocket`` and
    ``<Base>Exchange`` in namespace: one unittest class per transport."""
    for name in TRANSPORTS:
        cls_name = base.__name__ + name.capitalize()
        namespace[cls_name] = type(cls_name, (PerTransport, base, unittest.TestCase),
                                 {"transport": name, "__module__": namespace["__name__"]})
