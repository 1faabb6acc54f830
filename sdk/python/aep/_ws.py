"""The client side of the WebSocket protocol (RFC 6455) without I/O: the
opening handshake's request and the check of its answer, frames encoded
(masked, as a client must) and frames parsed from the bytes a server sent.
aep.Client's blocking connection and aep.AsyncClient's asyncio protocol
(transports.py) both drive it, so the SDK needs nothing beyond the standard
library for ``GET /ws`` (docs/DECISIONS.md, The Python SDK's own WebSocket).

Only what aep's WebSocket transport uses is supported: text and binary
messages, fragmented or not, with control frames (ping, pong, close) between
fragments; no extensions (no compression) and no subprotocols. A server that
breaks the protocol (a masked frame, reserved bits, an unknown opcode, a
fragmented or oversized control frame, a continuation with nothing to
continue, a message over the size limit, text that is not UTF-8) raises
WSProtocolError carrying the close code to send (1002, 1007 or 1009).
"""

from __future__ import annotations

import base64
import hashlib
import os
import struct
from typing import Mapping, Optional

OP_CONT, OP_TEXT, OP_BINARY = 0x0, 0x1, 0x2
OP_CLOSE, OP_PING, OP_PONG = 0x8, 0x9, 0xA
_DATA_OPS = (OP_TEXT, OP_BINARY)
_CONTROL_OPS = (OP_CLOSE, OP_PING, OP_PONG)

_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

# Close codes (RFC 6455 §7.4.1).
CLOSE_NORMAL = 1000
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_NO_STATUS = 1005  # never sent: a close frame without a code
CLOSE_INVALID_PAYLOAD = 1007
CLOSE_TOO_BIG = 1009

_pack_H = struct.Struct("!H").pack
_pack_Q = struct.Struct("!Q").pack
_unpack_H = struct.Struct("!H").unpack_from
_unpack_Q = struct.Struct("!Q").unpack_from


class WSProtocolError(Exception):
    """The server broke the WebSocket protocol; ``code`` is the close code
    to answer it with."""

    def __init__(self, message: str, code: int = CLOSE_PROTOCOL_ERROR) -> None:
        super().__init__(message)
        self.code = code


class HandshakeRefused(Exception):
    """The server did not switch protocols: ``status`` is its HTTP status
    (0 when the answer was not HTTP), ``headers`` its headers (names in
    lower case)."""

    def __init__(self, message: str, status: int, headers: Mapping[str, str]) -> None:
        super().__init__(message)
        self.status = status
        self.status_code = status  # the name websockets gives it, which callers may know
        self.headers = dict(headers)


# --- the opening handshake


def new_key() -> str:
    """A fresh Sec-WebSocket-Key: 16 random bytes, base64."""
    return base64.b64encode(os.urandom(16)).decode()


def accept_for(key: str) -> str:
    """The Sec-WebSocket-Accept a server must answer key with."""
    return base64.b64encode(hashlib.sha1((key + _GUID).encode()).digest()).decode()


def handshake_request(host: str, path: str, key: str, headers: Mapping[str, str]) -> bytes:
    """The upgrade request for path on host (``host:port``). Header values
    with a line break are refused: they would smuggle headers."""
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
    for k, v in headers.items():
        if any(c in str(k) + str(v) for c in "\r\n\0") or ":" in str(k):
            raise ValueError(f"WebSocket header {k!r}: a name or value with a line break, NUL or colon")
        lines.append(f"{k}: {v}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def parse_response_head(head: bytes) -> tuple[int, dict[str, str]]:
    """The status and headers (names in lower case; a repeated header's
    values joined with ", ") of an HTTP response head, without its blank
    line."""
    text = head.decode("latin-1")
    lines = text.split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise HandshakeRefused(f"not an HTTP answer: {lines[0][:80]!r}", 0, {})
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep:
            raise HandshakeRefused(f"malformed header line {line[:80]!r}", int(parts[1]), headers)
        name = name.strip().lower()
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return int(parts[1]), headers


def check_handshake(status: int, headers: Mapping[str, str], key: str) -> None:
    """Raises HandshakeRefused unless the answer switches to WebSocket for
    key without extensions or a subprotocol (none were asked for)."""
    if status != 101:
        raise HandshakeRefused(f"HTTP {status}", status, headers)
    if headers.get("upgrade", "").lower() != "websocket" or \
            "upgrade" not in [t.strip().lower() for t in headers.get("connection", "").split(",")]:
        raise HandshakeRefused("the answer does not upgrade to websocket", status, headers)
    if headers.get("sec-websocket-accept") != accept_for(key):
        raise HandshakeRefused("wrong Sec-WebSocket-Accept", status, headers)
    if headers.get("sec-websocket-extensions") or headers.get("sec-websocket-protocol"):
        raise HandshakeRefused("the server chose an extension or subprotocol no one asked for", status, headers)


# --- frames the client sends


class _Keys:
    """Masking keys (RFC 6455 §5.3: unpredictable, from a strong source of
    entropy), read from os.urandom a page at a time rather than with a
    system call per frame."""

    def __init__(self) -> None:
        self._pool = b""
        self._at = 0

    def next(self) -> bytes:
        if self._at + 4 > len(self._pool):
            self._pool, self._at = os.urandom(4096), 0
        k = self._pool[self._at:self._at + 4]
        self._at += 4
        return k


_keys = _Keys()


def mask(data: bytes, key: bytes) -> bytes:
    """data XOR the repeated 4-byte key (masking and unmasking alike), as
    one big-integer XOR: a C loop, where a Python loop per byte would cost
    microseconds a message."""
    n = len(data)
    if n == 0:
        return b""
    reps = key * ((n >> 2) + 1)
    return (int.from_bytes(data, "little") ^ int.from_bytes(reps[:n], "little")).to_bytes(n, "little")


def encode_frame(opcode: int, payload: bytes, *, fin: bool = True) -> bytes:
    """One masked frame."""
    n = len(payload)
    b0 = (0x80 if fin else 0) | opcode
    if n < 126:
        head = bytes((b0, 0x80 | n))
    elif n < 65536:
        head = bytes((b0, 0xFE)) + _pack_H(n)
    else:
        head = bytes((b0, 0xFF)) + _pack_Q(n)
    key = _keys.next()
    return head + key + mask(payload, key)


def encode_text(text: str) -> bytes:
    """A text message in one masked frame."""
    return encode_frame(OP_TEXT, text.encode())


def encode_close(code: int = CLOSE_NORMAL, reason: str = "") -> bytes:
    """A close frame; its reason is cut to fit a control frame (123 bytes)."""
    if code == CLOSE_NO_STATUS:
        return encode_frame(OP_CLOSE, b"")
    return encode_frame(OP_CLOSE, _pack_H(code) + reason.encode()[:123])


def parse_close(payload: bytes) -> tuple[int, str]:
    """The code and reason of a received close frame (1005 when it has no
    code)."""
    if not payload:
        return CLOSE_NO_STATUS, ""
    if len(payload) == 1:
        raise WSProtocolError("a close frame with a one-byte payload")
    code = _unpack_H(payload)[0]
    if code < 1000 or code in (1004, 1005, 1006, 1015) or 1016 <= code < 3000 or code >= 5000:
        raise WSProtocolError(f"close code {code} is not one a peer may send")
    try:
        return code, payload[2:].decode()
    except UnicodeDecodeError:
        raise WSProtocolError("a close reason that is not UTF-8", CLOSE_INVALID_PAYLOAD) from None


# --- frames the server sends


class Reader:
    """Parses the frames a server sends from the bytes fed to it.

    ``next()`` returns the next complete item as ``(opcode, payload)``: a
    whole message (OP_TEXT with its str, OP_BINARY with its bytes, the
    fragments of a fragmented one joined) or a control frame (OP_PING,
    OP_PONG, OP_CLOSE with its bytes); None when more bytes are needed. It
    raises WSProtocolError on a broken frame, after which the connection is
    to be closed with its code. ``max_size`` bounds a message (and so what
    a server can make the client buffer)."""

    __slots__ = ("_buf", "_frag_op", "_frags", "_frag_len", "max_size")

    def __init__(self, max_size: int) -> None:
        self._buf = bytearray()
        self._frag_op = -1  # the opcode of a fragmented message under way
        self._frags: list[bytes] = []
        self._frag_len = 0
        self.max_size = max_size

    def feed(self, data: bytes) -> None:
        self._buf += data

    def buffered(self) -> int:
        """Bytes received and not yet returned."""
        return len(self._buf)

    def next(self) -> Optional[tuple[int, object]]:
        while True:
            buf = self._buf
            have = len(buf)
            if have < 2:
                return None
            b0, b1 = buf[0], buf[1]
            if b1 & 0x80:
                raise WSProtocolError("the server masked a frame")
            if b0 & 0x70:
                raise WSProtocolError("a frame with reserved bits set (no extension was negotiated)")
            n = b1 & 0x7F
            at = 2
            if n == 126:
                if have < 4:
                    return None
                n = _unpack_H(buf, 2)[0]
                at = 4
            elif n == 127:
                if have < 10:
                    return None
                n = _unpack_Q(buf, 2)[0]
                at = 10
            op = b0 & 0x0F
            fin = b0 & 0x80
            if op in _CONTROL_OPS:
                if n > 125 or not fin:
                    raise WSProtocolError("a control frame that is fragmented or longer than 125 bytes")
            elif op in _DATA_OPS or op == OP_CONT:
                if n > self.max_size or self._frag_len + n > self.max_size:
                    raise WSProtocolError(f"a message over {self.max_size} bytes", CLOSE_TOO_BIG)
            else:
                raise WSProtocolError(f"unknown opcode {op:#x}")
            end = at + n
            if have < end:
                return None
            payload = bytes(buf[at:end])
            del buf[:end]
            if op in _CONTROL_OPS:
                return op, payload
            if op == OP_CONT:
                if self._frag_op < 0:
                    raise WSProtocolError("a continuation frame with no message to continue")
                self._frags.append(payload)
                self._frag_len += n
                if not fin:
                    continue
                op, payload = self._frag_op, b"".join(self._frags)
                self._frag_op, self._frags, self._frag_len = -1, [], 0
            elif self._frag_op >= 0:
                raise WSProtocolError("a new message before the fragmented one ended")
            elif not fin:
                self._frag_op, self._frags, self._frag_len = op, [payload], n
                continue
            if op == OP_TEXT:
                try:
                    return OP_TEXT, payload.decode()
                except UnicodeDecodeError:
                    raise WSProtocolError("a text message that is not UTF-8", CLOSE_INVALID_PAYLOAD) from None
            return op, payload
