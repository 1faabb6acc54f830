"""Reading an HTTP/1.1 response body that streams, without I/O: the chunked
transfer coding and the event-stream format (WHATWG HTML, Server-sent
events), for the synchronous client's ``GET /stream`` and the event stream
a single exchange may answer with. Bytes are fed in as they come; complete
events come out.
"""

from __future__ import annotations

from typing import Optional


class BodyError(Exception):
    """The body breaks the chunked coding or a limit."""


class Chunked:
    """Decodes the chunked transfer coding (RFC 9112 §7.1): ``feed`` takes
    raw bytes and returns the body bytes they complete; ``done`` is set
    after the last chunk (trailers are read and dropped)."""

    __slots__ = ("_buf", "_left", "_state", "done")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._left = 0  # bytes of the current chunk still to come
        self._state = "size"  # size, data, crlf, trailer
        self.done = False

    def feed(self, data: bytes) -> bytes:
        self._buf += data
        out = bytearray()
        buf = self._buf
        while not self.done:
            if self._state == "size":
                i = buf.find(b"\r\n")
                if i < 0:
                    if len(buf) > 4096:
                        raise BodyError("a chunk size line over 4 KiB")
                    break
                size = bytes(buf[:i]).split(b";", 1)[0].strip()
                del buf[:i + 2]
                try:
                    self._left = int(size, 16)
                except ValueError:
                    raise BodyError(f"bad chunk size {size[:20]!r}") from None
                if self._left < 0:
                    raise BodyError("negative chunk size")
                self._state = "trailer" if self._left == 0 else "data"
            elif self._state == "data":
                if not buf:
                    break
                take = min(self._left, len(buf))
                out += buf[:take]
                del buf[:take]
                self._left -= take
                if self._left == 0:
                    self._state = "crlf"
            elif self._state == "crlf":
                if len(buf) < 2:
                    break
                if buf[:2] != b"\r\n":
                    raise BodyError("a chunk not followed by CRLF")
                del buf[:2]
                self._state = "size"
            else:  # trailer: lines up to an empty one
                i = buf.find(b"\r\n")
                if i < 0:
                    if len(buf) > 65536:
                        raise BodyError("trailers over 64 KiB")
                    break
                line = bytes(buf[:i])
                del buf[:i + 2]
                if not line:
                    self.done = True
        return bytes(out)


class EventStream:
    """Parses the event-stream format: ``feed`` takes body bytes and
    returns the events they complete as (data, id) pairs, data being the
    event's data lines joined with newlines and id its ``id`` field (None
    when it had none). Comments (heartbeats) and other fields are skipped;
    an event without data is not returned. ``limit`` bounds a line."""

    __slots__ = ("_buf", "_data", "_id", "limit")

    def __init__(self, limit: int) -> None:
        self._buf = bytearray()
        self._data: list[str] = []
        self._id: Optional[str] = None
        self.limit = limit

    def feed(self, data: bytes) -> list[tuple[str, Optional[str]]]:
        self._buf += data
        buf = self._buf
        out: list[tuple[str, Optional[str]]] = []
        start = 0
        while True:
            i = buf.find(b"\n", start)
            if i < 0:
                break
            line = buf[start:i]
            start = i + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data:
                    out.append(("\n".join(self._data), self._id))
                self._data, self._id = [], None
                continue
            if line[:1] == b":":
                continue  # a comment: heartbeat
            field, _, value = bytes(line).decode().partition(":")
            if value.startswith(" "):
                value = value[1:]
            if field == "data":
                self._data.append(value)
            elif field == "id":
                self._id = value
        del buf[:start]
        if len(buf) > self.limit:
            raise BodyError(f"an event-stream line over {self.limit} bytes")
        return out
