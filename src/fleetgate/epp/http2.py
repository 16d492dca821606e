"""The server side of HTTP/2 (RFC 9113) over cleartext TCP, as the picker's gRPC needs it.

Its only peers are a data plane's gRPC client (Envoy) and health probes. It reads frames,
decodes header blocks (`hpack`), keeps both directions' flow control and hands each stream
to a handler: `data(chunk)`, `end()` when the peer ends its side, `reset()` when the
stream or the connection goes away. Writes are gathered and sent once per loop turn.

Not a general server: no server push, no priorities, no TLS, and it answers only with the
header blocks its caller prebuilds (never indexed, so the peer's decoder needs no table).
Written for cost: grpcio's asyncio server spent about a millisecond per picked request on
its own machinery, more than the proxy spends on a whole request (docs/kubernetes.md).
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Callable
from typing import Protocol

import hpack

log = logging.getLogger("fleetgate.epp")

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS = 0, 1, 2, 3, 4
PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = 5, 6, 7, 8, 9
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
NO_ERROR, PROTOCOL_ERROR, FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR = 0, 1, 3, 6
COMPRESSION_ERROR = 9
SETTINGS_INITIAL_WINDOW_SIZE, SETTINGS_MAX_FRAME_SIZE = 4, 5

MAX_WINDOW = 2**31 - 1
DEFAULT_WINDOW = 65535
DEFAULT_FRAME = 16384
OUR_FRAME = 1 << 20  # the largest frame we take: a whole prompt in few frames
# the connection window we keep open: replenished once half of it is used
WINDOW_REFILL = 1 << 30
# how long frames nobody waits for (a call's end that only tidies up) may wait to go out
# with the next frames that are waited for: one write (and one wake-up of the peer) less
LAZY_SECONDS = 0.05

_HEAD = struct.Struct(">IBI")  # length (24 bits) and type, flags, stream id
_SETTING = struct.Struct(">HI")
_WORD = struct.Struct(">I")
_NO_ERROR = _WORD.pack(NO_ERROR)


def frame(kind: int, flags: int, stream_id: int, payload: bytes = b"") -> bytes:
    return _HEAD.pack((len(payload) << 8) | kind, flags, stream_id) + payload


def literal_block(headers: list[tuple[bytes, bytes]]) -> bytes:
    """A header block of literals never added to a table: any decoder reads it in any state.
    Names and values shorter than 127 bytes (our own, fixed ones)."""
    out = bytearray()
    for name, value in headers:
        if name == b":status" and value == b"200":
            out.append(0x88)  # the static table's `:status: 200`
            continue
        if len(name) > 126 or len(value) > 126:
            raise ValueError("a literal header longer than 126 bytes")
        out += bytes((0x00, len(name))) + name + bytes((len(value),)) + value
    return bytes(out)


class StreamHandler(Protocol):
    def data(self, chunk: bytes) -> None: ...
    def end(self) -> None: ...
    def reset(self) -> None: ...


class ProtocolError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Stream:
    __slots__ = ("handler", "local_closed", "pending", "remote_closed", "send_window")

    def __init__(self, handler: StreamHandler, send_window: int) -> None:
        self.handler = handler
        self.send_window = send_window
        self.remote_closed = False
        self.local_closed = False
        # what waits for the peer's window: (data, end_stream), then maybe (trailers, None)
        self.pending: list[tuple[bytes, bool | None]] = []


# the stream's opener: (connection, stream id, request headers) -> its handler
Opener = Callable[["Http2Connection", int, dict[bytes, bytes]], StreamHandler]


class Http2Connection(asyncio.Protocol):
    """One client connection."""

    def __init__(self, opener: Opener, connections: set[Http2Connection]) -> None:
        self.opener = opener
        self.connections = connections
        self.transport: asyncio.Transport | None = None
        self.streams: dict[int, _Stream] = {}
        self.last_stream = 0
        self._buf = bytearray()
        self._preface = False
        self._decoder = hpack.Decoder()
        self._known: dict[bytes, dict[bytes, bytes]] = {}  # blocks that keep the table
        self._continued: tuple[int, int, bytearray] | None = None  # (stream, flags, block)
        self._out: list[bytes] = []
        self._flushing = False
        self._urgent = False  # something in `_out` is waited for
        self._lazy_timer = False  # a flush of what nobody waits for is scheduled
        self._receiving = False
        self._peer_window = DEFAULT_WINDOW  # the peer's connection window for our DATA
        self._peer_initial = DEFAULT_WINDOW
        self._peer_frame = DEFAULT_FRAME
        self._unacked = 0  # DATA bytes received since our last connection WINDOW_UPDATE
        self.closing = False
        self._idle: asyncio.Future[None] | None = None  # resolved once no stream is left

    # ---- the transport ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.connections.add(self)
        settings = _SETTING.pack(SETTINGS_INITIAL_WINDOW_SIZE, MAX_WINDOW) + _SETTING.pack(
            SETTINGS_MAX_FRAME_SIZE, OUR_FRAME
        )
        self._write(frame(SETTINGS, 0, 0, settings))
        self._write(frame(WINDOW_UPDATE, 0, 0, _WORD.pack(MAX_WINDOW - DEFAULT_WINDOW)))

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        self.transport = None
        streams, self.streams = self.streams, {}
        for stream in streams.values():
            self._reset_handler(stream)
        self._check_idle()

    def data_received(self, data: bytes) -> None:
        self._receiving = True
        try:
            self._receive(data)
        except ProtocolError as exc:
            log.warning("HTTP/2 connection error %d: %s", exc.code, exc)
            self.goaway(exc.code, str(exc).encode())
            self._flush(everything=True)
            if self.transport is not None:
                self.transport.close()
            return
        finally:
            self._receiving = False
        self._flush()

    def _write(self, data: bytes, lazy: bool = False) -> None:
        self._out.append(data)
        if lazy:
            if not self._lazy_timer:
                self._lazy_timer = True
                asyncio.get_running_loop().call_later(LAZY_SECONDS, self._flush_lazy)
            return
        self._urgent = True
        if not self._receiving and not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self, everything: bool = False) -> None:
        """Writes what is gathered, when some of it is waited for (or `everything`)."""
        self._flushing = False
        if not (self._urgent or everything):
            return
        self._urgent = False
        if self._out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(self._out))
        self._out.clear()

    def _flush_lazy(self) -> None:
        self._lazy_timer = False
        self._flush(everything=True)

    # ---- frames in ----------------------------------------------------------------------
    def _receive(self, data: bytes) -> None:
        if self._buf:
            self._buf += data
            data = bytes(self._buf)
            self._buf.clear()
        pos = 0
        if not self._preface:
            if len(data) < len(PREFACE):
                self._buf += data
                return
            if not data.startswith(PREFACE):
                raise ProtocolError(PROTOCOL_ERROR, "not an HTTP/2 client preface")
            self._preface = True
            pos = len(PREFACE)
        size = len(data)
        unpack = _HEAD.unpack_from
        streams = self.streams
        while size - pos >= 9:
            length_kind, flags, stream_id = unpack(data, pos)
            length = length_kind >> 8
            end = pos + 9 + length
            if end > size:
                if length > OUR_FRAME:
                    raise ProtocolError(FRAME_SIZE_ERROR, "frame larger than allowed")
                break
            kind = length_kind & 0xFF
            if kind != DATA or self._continued is not None:
                self._frame(kind, flags, stream_id & 0x7FFFFFFF, data[pos + 9 : end])
                pos = end
                continue
            # DATA, most frames by far: handled here, without a call of its own
            start, pos = pos + 9, end
            self._unacked += length  # the whole payload counts, padding too
            if self._unacked >= WINDOW_REFILL:
                self._write(frame(WINDOW_UPDATE, 0, 0, _WORD.pack(self._unacked)))
                self._unacked = 0
            stream = streams.get(stream_id & 0x7FFFFFFF)
            if stream is None or stream.remote_closed:
                continue  # a stream we already ended or reset: its late data is dropped
            if flags & PADDED and length:
                start, end = start + 1, end - data[start]
            ended = flags & END_STREAM
            if ended:  # known before the handler may answer and end its side
                stream.remote_closed = True
            if end > start:
                stream.handler.data(data[start:end])
            if ended:
                stream.handler.end()
        if pos < size:
            self._buf += data[pos:]

    def _frame(self, kind: int, flags: int, stream_id: int, payload: bytes) -> None:
        if self._continued is not None and kind != CONTINUATION:
            raise ProtocolError(PROTOCOL_ERROR, "a header block was interrupted")
        if kind == HEADERS:
            self._headers(flags, stream_id, payload)
        elif kind == CONTINUATION:
            if self._continued is None or self._continued[0] != stream_id:
                raise ProtocolError(PROTOCOL_ERROR, "an unexpected CONTINUATION")
            self._continued[2].extend(payload)
            if flags & END_HEADERS:
                stream_id, first_flags, block = self._continued
                self._continued = None
                self._header_block(first_flags, stream_id, bytes(block))
        elif kind == WINDOW_UPDATE:
            self._window_update(stream_id, payload)
        elif kind == SETTINGS:
            if not flags & ACK:
                self._settings(payload)
        elif kind == PING:
            if len(payload) != 8:
                raise ProtocolError(FRAME_SIZE_ERROR, "a PING frame of a bad length")
            if not flags & ACK:
                self._write(frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM:
            stream = self.streams.pop(stream_id, None)
            if stream is not None:
                self._reset_handler(stream)
                self._check_idle()
        elif kind == GOAWAY:
            self.closing = True
        elif kind == PUSH_PROMISE:
            raise ProtocolError(PROTOCOL_ERROR, "a client cannot push")
        # PRIORITY and unknown frame types are ignored, as the protocol allows

    def _headers(self, flags: int, stream_id: int, payload: bytes) -> None:
        start, stop = 0, len(payload)
        if flags & PADDED:
            start, stop = 1, stop - payload[0]
        if flags & PRIORITY_FLAG:
            start += 5
        block = payload[start:stop]
        if not flags & END_HEADERS:
            self._continued = (stream_id, flags, bytearray(block))
            return
        self._header_block(flags, stream_id, block)

    def _header_block(self, flags: int, stream_id: int, block: bytes) -> None:
        headers = self._decode(block)
        ended = bool(flags & END_STREAM)
        stream = self.streams.get(stream_id)
        if stream is not None:  # trailers: only their end matters here
            if ended and not stream.remote_closed:
                stream.remote_closed = True
                stream.handler.end()
            return
        if stream_id <= self.last_stream or not stream_id & 1:
            return  # a stream already closed (or not the client's)
        self.last_stream = stream_id
        stream = _Stream(_NO_HANDLER, self._peer_initial)
        stream.remote_closed = ended
        self.streams[stream_id] = stream
        stream.handler = self.opener(self, stream_id, headers)
        if ended:
            stream.handler.end()

    def _decode(self, block: bytes) -> dict[bytes, bytes]:
        """The block's headers. A client sends the same few blocks again and again once their
        fields are in the table; those that leave the table as it is are kept."""
        known = self._known.get(block)
        if known is not None:
            return known
        try:
            headers = dict(self._decoder.decode(block, raw=True))  # type: ignore[arg-type]
        except hpack.HPACKError as exc:
            raise ProtocolError(COMPRESSION_ERROR, f"bad header block: {exc}") from None
        if _keeps_table(block):
            if len(self._known) > 64:
                self._known.clear()
            self._known[block] = headers
        else:  # the table has changed: what was kept may read otherwise now
            self._known.clear()
        return headers

    def _settings(self, payload: bytes) -> None:
        if len(payload) % 6:
            raise ProtocolError(FRAME_SIZE_ERROR, "a SETTINGS frame of a bad length")
        for pos in range(0, len(payload), 6):
            key, value = _SETTING.unpack_from(payload, pos)
            if key == SETTINGS_INITIAL_WINDOW_SIZE:
                if value > MAX_WINDOW:
                    raise ProtocolError(FLOW_CONTROL_ERROR, "initial window too large")
                delta = value - self._peer_initial
                self._peer_initial = value
                for stream in self.streams.values():
                    stream.send_window += delta
            elif key == SETTINGS_MAX_FRAME_SIZE:
                self._peer_frame = value
        self._write(frame(SETTINGS, ACK, 0))
        self._drain_all()

    def _window_update(self, stream_id: int, payload: bytes) -> None:
        if len(payload) != 4:
            raise ProtocolError(FRAME_SIZE_ERROR, "a WINDOW_UPDATE frame of a bad length")
        (increment,) = _WORD.unpack(payload)
        increment &= 0x7FFFFFFF
        if stream_id == 0:
            self._peer_window += increment
            self._drain_all()
            return
        stream = self.streams.get(stream_id)
        if stream is not None:
            stream.send_window += increment
            self._drain(stream_id, stream)

    def _reset_handler(self, stream: _Stream) -> None:
        try:
            stream.handler.reset()
        except Exception:
            log.exception("a stream's reset failed")

    # ---- frames out -------------------------------------------------------------------
    def send_headers(
        self, stream_id: int, block: bytes, end_stream: bool = False, lazy: bool = False
    ) -> None:
        """A header block; one that follows data still waiting for a window (the trailers,
        which always end the stream) waits behind it. `lazy`: nobody waits for it (it may
        go out with the next frames that are waited for, or within LAZY_SECONDS)."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.local_closed:
            return
        if stream.pending:
            stream.pending.append((block, None))
            return
        if end_stream:  # with the stream's reset, when it goes with it: one write
            out = frame(HEADERS, END_HEADERS | END_STREAM, stream_id, block)
            self._write(out + self._local_end(stream_id, stream), lazy)
        else:
            self._write(frame(HEADERS, END_HEADERS, stream_id, block), lazy)

    def send_whole(self, stream_id: int, head: bytes, data: bytes, trailers: bytes) -> None:
        """A whole answer: its header block (none when `head` is empty: sent before), its
        data and its trailers, which end the stream; in one write when the windows allow."""
        stream = self.streams.get(stream_id)
        if stream is None or stream.local_closed:
            return
        size = len(data)
        if stream.pending or size > min(self._peer_window, stream.send_window, self._peer_frame):
            if head:
                self.send_headers(stream_id, head)
            self.send_data(stream_id, data)
            self.send_headers(stream_id, trailers, end_stream=True)
            return
        self._peer_window -= size
        stream.send_window -= size
        pack = _HEAD.pack
        parts = [
            pack(size << 8 | DATA, 0, stream_id),
            data,
            pack(len(trailers) << 8 | HEADERS, END_HEADERS | END_STREAM, stream_id),
            trailers,
        ]
        if head:
            parts[:0] = (pack(len(head) << 8 | HEADERS, END_HEADERS, stream_id), head)
        parts.append(self._local_end(stream_id, stream))
        self._write(b"".join(parts))

    def send_data(self, stream_id: int, data: bytes, end_stream: bool = False) -> None:
        stream = self.streams.get(stream_id)
        if stream is None or stream.local_closed:
            return
        if stream.pending:
            stream.pending.append((data, end_stream))
            return
        rest = self._send_data(stream_id, stream, data, end_stream)
        if rest is not None:
            stream.pending.append((rest, end_stream))

    def _send_data(
        self, stream_id: int, stream: _Stream, data: bytes, end_stream: bool
    ) -> bytes | None:
        """Sends what the windows allow; returns what they do not (None: all sent)."""
        while True:
            room = min(self._peer_window, stream.send_window, self._peer_frame)
            if len(data) <= room:
                size = len(data)
                self._peer_window -= size
                stream.send_window -= size
                if end_stream:
                    out = frame(DATA, END_STREAM, stream_id, data)
                    self._write(out + self._local_end(stream_id, stream))
                else:
                    self._write(frame(DATA, 0, stream_id, data))
                return None
            if room <= 0:
                return data
            self._peer_window -= room
            stream.send_window -= room
            self._write(frame(DATA, 0, stream_id, data[:room]))
            data = data[room:]

    def _drain(self, stream_id: int, stream: _Stream) -> None:
        while stream.pending:
            payload, end = stream.pending[0]
            if end is None:  # the trailers, after the data
                stream.pending.clear()
                out = frame(HEADERS, END_HEADERS | END_STREAM, stream_id, payload)
                self._write(out + self._local_end(stream_id, stream))
                return
            rest = self._send_data(stream_id, stream, payload, end)
            if rest is not None:
                stream.pending[0] = (rest, end)
                return
            del stream.pending[0]

    def _drain_all(self) -> None:
        for stream_id, stream in list(self.streams.items()):
            if stream.pending:
                self._drain(stream_id, stream)

    def _local_end(self, stream_id: int, stream: _Stream) -> bytes:
        """Our side of the stream has ended: it is forgotten. Returns the frame that goes
        out right after the end (b"" when the peer has ended its side too)."""
        stream.local_closed = True
        self.streams.pop(stream_id, None)
        if self._idle is not None:
            self._check_idle()
        if stream.remote_closed:
            return b""
        # the answer is complete: the rest of the request is not wanted (RFC 9113 8.1)
        return _HEAD.pack(4 << 8 | RST_STREAM, 0, stream_id) + _NO_ERROR

    def reset_stream(self, stream_id: int, code: int) -> None:
        if self.streams.pop(stream_id, None) is not None:
            self._write(frame(RST_STREAM, 0, stream_id, _WORD.pack(code)))
            self._check_idle()

    def idle(self) -> asyncio.Future[None]:
        """Resolved once the connection has no stream left (for a graceful stop)."""
        if self._idle is None:
            self._idle = asyncio.get_running_loop().create_future()
        self._check_idle()
        return self._idle

    def _check_idle(self) -> None:
        if self._idle is not None and not self.streams and not self._idle.done():
            self._idle.set_result(None)

    def goaway(self, code: int = NO_ERROR, debug: bytes = b"") -> None:
        self.closing = True
        payload = _WORD.pack(self.last_stream) + _WORD.pack(code) + debug
        self._write(frame(GOAWAY, 0, 0, payload))

    def close(self) -> None:
        self._flush(everything=True)
        if self.transport is not None:
            self.transport.close()


class _NoHandler:
    """A stream's handler until its opener has made the real one."""

    def data(self, chunk: bytes) -> None:
        pass

    def end(self) -> None:
        pass

    def reset(self) -> None:
        pass


_NO_HANDLER = _NoHandler()


def _keeps_table(block: bytes) -> bool:
    """Whether decoding the block leaves the dynamic table as it was (RFC 7541 6): no field
    is added to it and its size is not changed. Such a block reads the same until the table
    changes. The block has been decoded already, so it is well formed."""
    pos, size = 0, len(block)
    while pos < size:
        byte = block[pos]
        if byte & 0x80:  # an indexed field
            pos = _integer(block, pos, 7)[1]
            continue
        if byte & 0xE0:  # a field added to the table, or a size update
            return False
        name, pos = _integer(block, pos, 4)  # a literal kept out of the table
        if name == 0:
            length, pos = _integer(block, pos, 7)
            pos += length
        length, pos = _integer(block, pos, 7)
        pos += length
    return True


def _integer(block: bytes, pos: int, prefix: int) -> tuple[int, int]:
    """An HPACK integer (RFC 7541 5.1) at `pos`: its value and the position after it."""
    mask = (1 << prefix) - 1
    value = block[pos] & mask
    pos += 1
    if value == mask:
        shift = 0
        while True:
            byte = block[pos]
            pos += 1
            value += (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
    return value, pos
