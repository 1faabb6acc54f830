"""A small fleet for the move tests: `aep serve` hosts that share one store
(a SQLite file, or a PostgreSQL schema when one is at hand) and drain on
SIGTERM with operator.snapshot_on_drain, and a loopback TCP forwarder that
stands in for the proxy: it sends every connection to the host the test
names, as a proxy sends requests for a host that is gone to the pool.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import unittest
import urllib.parse
import urllib.request
import uuid
from typing import Optional

from tests.hosts import TOKEN, _free_port, binary

# A host that cuts requests still in flight a second after SIGTERM, so a
# test can hold one in flight across the drain.
DRAIN_TIMEOUT = "1s"


class FleetHost:
    """`aep serve` with server.host_id, the shared store DSN and
    snapshot_on_drain; started when made, ready for sessions."""

    def __init__(self, host_id: str, dsn: str, *, snapshot_on_drain: bool = True) -> None:
        self.host_id = host_id
        self.data = tempfile.mkdtemp(prefix=f"aep-py-{host_id}-")
        cfg = os.path.join(self.data, "aep.yaml")
        with open(cfg, "w") as f:
            f.write(f"server:\n  host_id: {host_id}\n"
                    f"operator:\n  drain_timeout: {DRAIN_TIMEOUT}\n"
                    f"  snapshot_on_drain: {'true' if snapshot_on_drain else 'false'}\n"
                    f"store:\n  dsn: '{dsn.replace(chr(39), chr(39) * 2)}'\n")
        self.log = open(os.path.join(self.data, "host.log"), "wb")
        self.proc: Optional[subprocess.Popen[bytes]] = None
        for _ in range(5):
            self.port = _free_port()
            self.proc = subprocess.Popen(
                [binary(), "serve", "--config", cfg, "--listen", f"127.0.0.1:{self.port}", "--data-dir", self.data],
                env={"PATH": os.environ.get("PATH", ""), "HOME": self.data, "AEP_AUTH_TOKEN": TOKEN},
                stdout=self.log, stderr=self.log, cwd=self.data)
            if self._ready():
                return
            self.proc.kill()
            self.proc.wait()
        self.log.close()
        raise RuntimeError(f"aep serve ({host_id}) did not become ready:\n{self.stderr()}")

    def _ready(self) -> bool:
        assert self.proc is not None
        deadline = time.time() + 30
        while time.time() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz", timeout=1) as r:
                    if r.status == 200:
                        return True
            except OSError:
                time.sleep(0.05)
        return False

    def stderr(self) -> str:
        self.log.flush()
        with open(os.path.join(self.data, "host.log"), "rb") as f:
            return f.read().decode(errors="replace")[-4000:]

    def drain(self) -> None:
        """SIGTERM, then waits for the drain to end and the process to exit 0."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        rc = self.proc.wait(30)
        if rc != 0:
            raise AssertionError(f"{self.host_id} exited {rc} after SIGTERM:\n{self.stderr()}")

    def kill(self) -> None:
        """SIGKILL: the host dies without draining."""
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if not self.log.closed:
            self.log.close()
        shutil.rmtree(self.data, ignore_errors=True)


class _Pair:
    """A client's connection through the forwarder and the forwarder's to
    the target. ``muted``: the target died and the forwarder has not
    noticed (Forwarder.kill_unnoticed)."""

    __slots__ = ("client", "upstream", "muted")

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.muted = False


class Forwarder:
    """A TCP forwarder on a free loopback port to 127.0.0.1:``target``.
    Each connection is joined to the target of the moment it was accepted;
    when either side ends, both are shut down."""

    def __init__(self, target: int) -> None:
        self.target = target
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(64)
        self.port = self._sock.getsockname()[1]
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._pairs: set[_Pair] = set()
        self._threads: list[threading.Thread] = []
        t = threading.Thread(target=self._accept, name="forwarder", daemon=True)
        t.start()
        self._threads.append(t)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def _accept(self) -> None:
        while True:
            try:
                c, _ = self._sock.accept()
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(c,), daemon=True)
            with self._lock:
                self._threads.append(t)
            t.start()

    def _serve(self, c: socket.socket) -> None:
        try:
            u = socket.create_connection(("127.0.0.1", self.target), timeout=5)
        except OSError:
            c.close()  # nothing there: the client sees its connection end
            return
        u.settimeout(None)
        pair = _Pair(c, u)
        with self._lock:
            self._open.update((c, u))
            self._pairs.add(pair)
        back = threading.Thread(target=self._pump, args=(u, c, pair), daemon=True)
        back.start()
        self._pump(c, u, pair)
        back.join()
        with self._lock:
            self._open.difference_update((c, u))
            self._pairs.discard(pair)
        c.close()
        u.close()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, pair: _Pair) -> None:
        try:
            while True:
                b = src.recv(65536)
                if pair.muted:
                    if src is pair.upstream:
                        return  # the dead target's end, not passed on: the client's connection stays open
                    break  # the client's bytes, lost as the forwarder finds its target gone
                if not b:
                    break
                dst.sendall(b)
        except OSError:
            if pair.muted and src is pair.upstream:
                return
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def kill_unnoticed(self) -> int:
        """What a proxy's connections to a host killed a moment ago are
        before it notices: every open connection's target goes silent and
        its end is not passed on, so the client's connection stays open
        until the client next sends something, which is lost as the
        connection is dropped (no close frame). Call before the target
        dies. Returns how many connections it affects."""
        with self._lock:
            pairs = list(self._pairs)
        for p in pairs:
            p.muted = True
        return len(pairs)

    def sever(self) -> int:
        """Cuts every open connection, as a network drop would (no close
        frame, no FIN of the peers' own), and goes on accepting new ones.
        Returns how many connections were cut."""
        with self._lock:
            cut = list(self._open)
        for s in cut:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        return len(cut) // 2

    def close(self) -> None:
        self._sock.close()
        with self._lock:
            for s in self._open:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            threads = list(self._threads)
        for t in threads:
            t.join(5)


class Store:
    """The store the fleet shares: a SQLite file in a temporary directory,
    or a fresh schema of the local PostgreSQL (``pg=True``)."""

    def __init__(self, pg: bool = False) -> None:
        self.dir = tempfile.mkdtemp(prefix="aep-py-store-")
        self.schema: Optional[str] = None
        if not pg:
            self.dsn = os.path.join(self.dir, "fleet.db")
            return
        self.base = pg_base()
        self.schema = "aep_py_move_" + uuid.uuid4().hex[:12]
        self._psql(f"CREATE SCHEMA {self.schema}")
        self.dsn = self.base + "&search_path=" + self.schema

    def _psql(self, sql: str) -> None:
        pw = os.environ.get("AEP_TEST_PG_PASSWORD", "")
        subprocess.run(["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-v", "ON_ERROR_STOP=1",
                        "-q", "-c", sql], env={**os.environ, "PGPASSWORD": pw, "PGOPTIONS": "--client-min-messages=warning"}, check=True,
                       stdout=subprocess.DEVNULL)

    def close(self) -> None:
        if self.schema is not None:
            self._psql(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        shutil.rmtree(self.dir, ignore_errors=True)


def pg_base() -> str:
    """The local PostgreSQL as .ci/run sets it up (AEP_TEST_PG_PASSWORD, the
    postgres user on 127.0.0.1:5432, schemas made with psql). Skips without
    it, unless CI is set."""
    pw = os.environ.get("AEP_TEST_PG_PASSWORD")
    missing = None
    if not pw:
        missing = "AEP_TEST_PG_PASSWORD is unset"
    elif shutil.which("psql") is None:
        missing = "psql is not installed"
    if missing:
        if os.environ.get("CI"):
            raise AssertionError(f"no PostgreSQL for the test: {missing}")
        raise unittest.SkipTest(f"no PostgreSQL: {missing} (CI unset)")
    return f"postgres://postgres:{urllib.parse.quote(pw, safe='')}@127.0.0.1:5432/postgres?sslmode=disable"
