"""An answer's status line and headers as bytes, checked as uvicorn checks them, and the
framing they set (a length, or chunks) and whether the connection stays open. Both server
fronts write heads with it (`front_request.py`, `response_cycle.py`)."""

from __future__ import annotations

import http
from collections.abc import Iterable
from dataclasses import dataclass


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %b\r\n" % (status, phrase)


STATUS_LINE = {status: _status_line(status) for status in range(100, 600)}

# The bytes a header name / value may not hold (uvicorn's HEADER_RE / HEADER_VALUE_RE), as
# sets to delete: deleting them changes the joined bytes' length exactly when one is there,
# a third of a regex's cost (its character class is tested byte by byte).
BAD_NAME = bytes(b for b in range(256) if b < 0x20 or b == 0x7F or b in b'()<>@,;:[]={} \t\\"')
BAD_VALUE = bytes(b for b in range(256) if (b < 0x20 and b != 0x09) or b == 0x7F)


def holds_any(data: bytes, forbidden: bytes) -> bool:
    return len(data.translate(None, forbidden)) != len(data)


@dataclass(slots=True)
class Head:
    """A written head and what it says about the body that follows."""

    data: bytes
    chunked: bool  # the body goes in chunks (no length was given)
    length: int  # the body's declared length (0 when chunked or bodyless)
    keep_alive: bool  # the connection stays open after the answer


def response_head(
    status: int,
    headers: Iterable[tuple[bytes, bytes]],
    *,
    head_request: bool,
    keep_alive: bool,
) -> Head:
    """The status line and headers (`headers` include the server's defaults), checked; a
    RuntimeError for a name or value that may not be sent."""
    content = [STATUS_LINE[status]]
    says_close = False
    chunked: bool | None = None
    length = 0
    names: list[bytes] = []
    values: list[bytes] = []
    for raw_name, value in headers:
        names.append(raw_name)
        values.append(value)
        name = raw_name.lower()
        if name == b"content-length" and chunked is None:
            length = int(value.decode())
            chunked = False
        elif name == b"transfer-encoding" and value.lower() == b"chunked":
            length = 0
            chunked = True
        elif name == b"connection" and b"close" in (
            token.strip().lower() for token in value.split(b",")
        ):
            keep_alive = False
            says_close = True
        content += (name, b": ", value, b"\r\n")
    # one check for all names and one for all values: each is a class of forbidden bytes,
    # so one is in the joined bytes exactly when it is in some name or value
    if holds_any(b"".join(names), BAD_NAME):
        raise RuntimeError("Invalid HTTP header name.")
    if holds_any(b"".join(values), BAD_VALUE):
        raise RuntimeError("Invalid HTTP header value.")
    if not keep_alive and not says_close:
        content.append(b"connection: close\r\n")
    if chunked is None:
        chunked = not (head_request or status in (204, 304))
        if chunked:
            content.append(b"transfer-encoding: chunked\r\n")
    content.append(b"\r\n")
    return Head(b"".join(content), chunked, length, keep_alive)
