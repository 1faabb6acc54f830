"""A scripted WebSocket server for the tests of the SDK's own framing
(aep/_ws.py): a real listening socket on loopback whose every frame is
written and read here byte by byte, with RFC 6455's server side done
independently of the SDK (its own handshake answer, frame encoder and
parser), so that a test can send what a real host rarely does (fragments
with pings between them, a close, broken frames) and check what the client
put on the wire (masking, pongs, close codes)."""

from __future__ import annotations

import base64
import hashlib
import socket
import struct
import threading
import time
from typing import Callable, Optional

GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Frame:
    def __init__(self, fin: bool, opcode: int, masked: bool, key: bytes, payload: bytes) -> None:
        self.fin, self.opcode, self.masked, self.key, self.payload = fin, opcode, masked, key, payload

    def __repr__(self) -> str:
        return f"Frame(fin={self.fin}, op={self.opcode:#x}, masked={self.masked}, {self.payload[:40]!r})"


class Conn:
    """The server's side of one accepted connection."""

    def __init__(self, sock: socket.socket, request: dict[str, str]) -> None:
        self.sock = sock
        self.request = request  # the upgrade request's headers, names in lower case
        self.buf = b""

    def _exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            d = self.sock.recv(65536)
            if not d:
                raise EOFError("the client closed the connection")
            self.buf += d
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def read_frame(self) -> Frame:
        b0, b1 = self._exactly(2)
        n = b1 & 0x7F
        if n == 126:
            n = struct.unpack("!H", self._exactly(2))[0]
        elif n == 127:
            n = struct.unpack("!Q", self._exactly(8))[0]
        masked = bool(b1 & 0x80)
        key = self._exactly(4) if masked else b""
        data = self._exactly(n)
        if masked:
            data = bytes(c ^ key[i % 4] for i, c in enumerate(data))
        return Frame(bool(b0 & 0x80), b0 & 0x0F, masked, key, data)

    def read_message(self) -> str:
        """The next text message, answering nothing (control frames fail the test)."""
        f = self.read_frame()
        if f.opcode != 0x1 or not f.fin:
            raise AssertionError(f"expected one text frame, got {f!r}")
        return f.payload.decode()

    def send_frame(self, opcode: int, payload: bytes, *, fin: bool = True, rsv: int = 0, mask: bool = False) -> None:
        n = len(payload)
        b0 = (0x80 if fin else 0) | rsv | opcode
        if n < 126:
            head = bytes((b0, (0x80 if mask else 0) | n))
        elif n < 65536:
            head = bytes((b0, (0x80 if mask else 0) | 126)) + struct.pack("!H", n)
        else:
            head = bytes((b0, (0x80 if mask else 0) | 127)) + struct.pack("!Q", n)
        if mask:
            key = b"\x01\x02\x03\x04"
            payload = key + bytes(c ^ key[i % 4] for i, c in enumerate(payload))
        self.sock.sendall(head + payload)

    def send_text(self, text: str) -> None:
        self.send_frame(0x1, text.encode())

    def send_close(self, code: int, reason: str = "") -> None:
        self.send_frame(0x8, struct.pack("!H", code) + reason.encode())

    def drop(self) -> None:
        """Ends the TCP connection without a close frame, as a network drop."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


class Peer:
    """Listens on a loopback port; each accepted connection is upgraded and
    handed to the next script of ``scripts`` on a thread of its own.
    ``errors`` collects what the scripts raised; ``headers`` are added to
    every upgrade answer."""

    def __init__(self, *scripts: Callable[[Conn], None], headers: Optional[dict[str, str]] = None) -> None:
        self.scripts = list(scripts)
        self.headers = headers or {}
        self.errors: list[BaseException] = []
        self.conns: list[Conn] = []
        self.lsock = socket.create_server(("127.0.0.1", 0))
        self.port = self.lsock.getsockname()[1]
        self.url = f"ws://127.0.0.1:{self.port}/ws"
        self._threads: list[threading.Thread] = []
        self._done = threading.Semaphore(0)  # released as each script ends
        self._accept = threading.Thread(target=self._serve, daemon=True)
        self._accept.start()

    def _serve(self) -> None:
        for script in self.scripts:
            try:
                sock, _ = self.lsock.accept()
            except OSError:
                return
            t = threading.Thread(target=self._run, args=(sock, script), daemon=True)
            t.start()
            self._threads.append(t)

    def _run(self, sock: socket.socket, script: Callable[[Conn], None]) -> None:
        try:
            head = b""
            while b"\r\n\r\n" not in head:
                d = sock.recv(4096)
                if not d:
                    return
                head += d
            text, _, rest = head.partition(b"\r\n\r\n")
            lines = text.decode("latin-1").split("\r\n")
            req = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
            accept = base64.b64encode(hashlib.sha1(req["sec-websocket-key"].encode() + GUID).digest()).decode()
            extra = "".join(f"{k}: {v}\r\n" for k, v in self.headers.items())
            sock.sendall(("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          f"Sec-WebSocket-Accept: {accept}\r\n{extra}\r\n").encode())
            conn = Conn(sock, req)
            conn.buf = rest
            self.conns.append(conn)
            try:
                script(conn)
            finally:
                self._done.release()
            if sock.fileno() < 0:
                return  # the script dropped it
            # The script is over: linger for the client's close frame, then
            # end the connection as a server does.
            sock.settimeout(2)
            try:
                while conn.read_frame().opcode != 0x8:
                    pass
            except (EOFError, OSError):
                pass
            conn.drop()
        except BaseException as e:  # noqa: BLE001 - reported to the test
            self.errors.append(e)

    def join(self, timeout: float = 10) -> None:
        """Waits for the scripts to end; raises the first error one raised."""
        deadline = time.monotonic() + timeout
        for _ in self.scripts:
            if not self._done.acquire(timeout=max(0, deadline - time.monotonic())):
                break
        if self.errors:
            raise self.errors[0]

    def close(self) -> None:
        self.lsock.close()
        for c in self.conns:
            try:
                c.sock.close()
            except OSError:
                pass
