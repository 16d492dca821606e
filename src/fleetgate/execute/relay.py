"""The relay of a stream after its first events: every stream, continuable or not.

The executor reads a stream's first events before answering (`Executor._first_events`);
this relays the rest, block of whole events by block: each is checked (every event JSON,
`Framing.json_events`), counted (the events feed the throughput EMA), and handed on with
the client's model name; the stream's end gives its usage and stop reason. A stream that
breaks, stalls or sends an event that is not JSON ends with a `stream_interrupted` event.

On the gateway's own front, a stream that is neither translated nor continuable is
relayed in the upstream connection's callback (`Tap`, `UpstreamResponse.pipe`): each read
is checked, counted, renamed and written to the client as it arrives, with no task woken
for it; the task that answers wakes when the client reads slower than the upstream sends
(it awaits the client's drain; the upstream waits, paused at 256 KiB unread), and at the
body's end or break, which it handles as any relay does.

An answer a later candidate could continue (`cont`, `execute/resume.py`) takes the same
loop with one more duty, done by the same check (`event_check.EndCheck`): the events that
may end the answer (a stop reason, a Messages block or message end, Ollama's last line, an
error event) are held back until the end shows whether the answer was cut, and a cut a
continuation takes over raises `StreamCut` in place of the stream's end.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable

from fleetgate.execute.event_check import EndCheck
from fleetgate.execute.framing import (
    DECODE_ERRORS,
    Framing,
    NotJson,
    check_json,
    stream_error_event,
)
from fleetgate.execute.http1 import UpstreamIOError, UpstreamResponse
from fleetgate.execute.outcome import CUT_SHORT, STREAM_BROKEN, Attempt
from fleetgate.execute.resume import INTERRUPTED, WINDOW, Continuation, StreamCut
from fleetgate.execute.rewrite import ModelRewriter
from fleetgate.execute.sse import CR, DONE, LF
from fleetgate.execute.usage import USAGE_TAIL, stop_in_stream, stream_usage
from fleetgate.fleet import Deployment
from fleetgate.ingress.profile import RequestProfile

_TRIM_AT = 2 * USAGE_TAIL  # the bytes of reads kept before they are cut to the tail


class Tap:
    """Where a plain relay's events go when the client's side can take them in a callback:
    `write` (True: the client reads slower; the relay awaits `drain` before the next)."""

    __slots__ = ("drain", "write")

    def __init__(self) -> None:
        self.write: Callable[[bytes], bool] | None = None
        self.drain: Callable[[], Awaitable[None]] | None = None


async def relay(
    resp: UpstreamResponse,
    rewriter: ModelRewriter,
    framing: Framing,
    head: tuple[bytes, bytes, int],
    attempt: Attempt,
    endpoint: str,
    finish: Callable[..., None],
    cont: tuple[Continuation, RequestProfile, Deployment, EndCheck] | None = None,
    inline: bool = False,
    tap: Tap | None = None,
) -> AsyncIterator[bytes]:
    """The stream from its `head` on: its first whole events as read (checked, not yet
    rewritten), the start of the next one, their data events; `cont` when a continuation
    may take the answer over (with the request and deployment of this attempt, and the
    check that read the head: where its ends are is known).

    The relay of a continuable first answer that the client gets as relayed (`inline`,
    `Continuation.inline`) keeps what it yields for the continuation and, once cut, goes
    on with the continuations itself (`Continuation.go_on`): no generator stands between
    it and the client. Any other raises `StreamCut` to `Continuation.stream`, which does
    the same from there.

    A `tap` whose writer the client's side sets before the stream's first step has each
    read's events written by the upstream connection's callback (`UpstreamResponse.pipe`);
    what the stream yields then is its head and its end. Not for a continuable answer."""
    assert tap is None or cont is None
    completed = False
    severe = False
    first, carry, events = head
    sep = framing.separator
    # data events (NDJSON lines) after the first one: tokens for the throughput EMA
    events -= 1
    stream_usage(attempt, first, framing)  # Anthropic's message_start: input tokens
    # the stream's end (usage, stop reason): the reads since the last trim, joined and
    # cut to the last USAGE_TAIL bytes once they hold twice that (`tail`)
    reads = [(first + carry)[-USAGE_TAIL:]]
    size = len(reads[0])
    more = False  # bytes after the head: else its usage was read above already
    ends: EndCheck | None = None
    count = framing.json_events
    keep: Callable[[bytes], None] | None = None  # the client's bytes, kept when `inline`
    if cont is not None:
        ends = cont[3]
        count = ends.events
        if ends.pending:  # the head's ends, held
            first = ends.take(first)
        if inline:
            keep = cont[0].relayed.append
    if first:
        first = framing.rewrite(rewriter, first)
    cut_by: str | None = None  # why a continuation takes over (`inline`)

    def tail() -> bytes:
        return b"".join(reads)[-USAGE_TAIL:]

    def kept(chunk: bytes) -> None:
        """The read is in the stream's tail (what its usage is read from at the end)."""
        nonlocal more, size
        more = True
        reads.append(chunk)
        size += len(chunk)
        if size > _TRIM_AT:
            reads[:] = [tail()]
            size = len(reads[0])

    def checked(chunk: bytes) -> bytes | None:
        """One read's whole events, checked and counted (None: no event ends in it yet);
        keeps what follows them, and the stream's tail. Raises NotJson."""
        nonlocal carry, events
        kept(chunk)
        block = carry + chunk if carry else chunk
        if CR in block:
            block = block.replace(b"\r\n", b"\n")
        if block.endswith(sep):  # the common read: whole events, nothing left over
            whole, carry = block, b""
        else:
            cut = block.rfind(sep)
            if cut < 0:
                carry = block
                return None
            end = cut + len(sep)
            whole, carry = block[:end], block[end:]
        if (n := count(whole)) is None:
            raise NotJson
        events += n
        return whole

    try:
        try:
            if first:
                if keep is not None:
                    keep(first)
                yield first
            write = None if tap is None else tap.write
            drain = None if tap is None else tap.drain
            if write is not None and drain is not None:
                # the client's writer takes the events in the upstream's own callback: the
                # task wakes for the client's back-pressure, and for the body's end
                send: Callable[[bytes], bool] = write
                refused: list[NotJson] = []
                identity = rewriter.identity
                compact, compact_to = rewriter.compact, rewriter.compact_to
                # an event that is one `data: ` line (SSE), checked here as
                # `Framing.json_events` would (slices compared: bytes.startswith and
                # endswith parse their arguments, dearer than the slice)
                prefix = framing.prefix
                start, stop = len(prefix), -len(sep)
                line_events = framing.line_events

                def piped(chunk: bytes) -> bool:
                    nonlocal events
                    if carry or CR in chunk or chunk[stop:] != sep:
                        try:
                            whole = checked(chunk)
                        except NotJson as exc:
                            refused.append(exc)
                            return True
                        return whole is not None and send(framing.rewrite(rewriter, whole))
                    # the common read, whole events and nothing carried: `checked`'s work
                    # without its carry
                    kept(chunk)
                    if not (prefix and chunk[:start] == prefix):
                        n = count(chunk)
                    elif LF in (data := chunk[start:stop]):  # more events, one line each
                        n = line_events(chunk, data)
                    else:  # one event
                        try:
                            if not chunk.isascii():
                                chunk.decode()
                            if data != DONE:
                                check_json(data)
                            n = 1
                        except DECODE_ERRORS:
                            n = None
                    if n is None:
                        refused.append(NotJson())
                        return True
                    events += n
                    if identity:
                        return send(chunk)
                    # `Framing.rewrite`'s first try, without its call
                    out = chunk.replace(compact, compact_to)
                    return send(out if out is not chunk else framing.rewrite_other(rewriter, chunk))

                while await resp.pipe(piped):
                    if refused:
                        raise refused[0]
                    await drain()
            if ends is None or not ends.errored:  # nothing after an error event is read
                while chunk := await resp.read_some():
                    if (whole := checked(chunk)) is None:
                        continue
                    if ends is not None and ends.pending:
                        whole = ends.take(whole)
                        if ends.errored:
                            if whole:
                                out = framing.rewrite(rewriter, whole)
                                if keep is not None:
                                    keep(out)
                                yield out
                            break
                        if not whole:
                            continue
                    out = framing.rewrite(rewriter, whole)
                    if keep is not None:
                        keep(out)
                    yield out
            if carry and not (ends is not None and ends.errored):
                # the last event, without its closing separator
                if (n := count(carry)) is None:
                    raise NotJson
                events += n
                last = ends.take(carry) if ends is not None and ends.pending else carry
                if last:
                    out = framing.rewrite(rewriter, last)
                    if keep is not None:
                        keep(out)
                    yield out
            if ends is not None and ends.errored and cont and cont[0].wanted(INTERRUPTED, attempt):
                attempt.error_class = STREAM_BROKEN
                attempt.message = "upstream stream sent an error event after output had started"
                raise StreamCut(INTERRUPTED)
            completed = True
            ending = tail()
            if more or carry:
                stream_usage(attempt, ending, framing)
            attempt.finish = stop_in_stream(ending)
            if cont is not None and ends is not None:
                continuation, profile, dep, _ = cont
                if not ends.errored and continuation.after_end(profile, dep, attempt):
                    attempt.error_class = CUT_SHORT
                    raise StreamCut(WINDOW)
                if held := ends.rest():
                    yield framing.rewrite(rewriter, held)
        except (UpstreamIOError, TimeoutError, NotJson) as exc:
            what = "sent an event that is not JSON" if isinstance(exc, NotJson) else "broke"
            severe = isinstance(exc, TimeoutError)
            attempt.error_class = STREAM_BROKEN
            attempt.failure = "timeout" if severe else "stream broken"
            attempt.message = f"upstream stream {what}: {type(exc).__name__}"
            if cont is not None and cont[0].wanted(INTERRUPTED, attempt):
                raise StreamCut(INTERRUPTED) from exc
            if ends is not None and (held := ends.rest()):
                # as a plain stream: what came before the break goes to the client
                yield framing.rewrite(rewriter, held)
            yield stream_error_event(
                endpoint,
                framing,
                "stream_interrupted",
                f"The upstream stream {what} after output had started "
                f"({type(exc).__name__}); retry the request.",
            )
        finally:
            if not completed and more:
                # the client left (or the stream broke) after what was read: a client that
                # has its last events may leave before the upstream ends its body, and the
                # usage those events carried was spent all the same
                stream_usage(attempt, tail(), framing)
            finish(completed, severe, events)
    except StreamCut as taken:
        if cont is None or not inline:
            raise  # to `Continuation.stream`
        cut_by = taken.reason
    if cont is not None and cut_by is not None:  # this attempt is over: the next one goes on
        rest = cont[0].go_on(cut_by)
        try:
            async for out in rest:
                yield out
        finally:
            await rest.aclose()
