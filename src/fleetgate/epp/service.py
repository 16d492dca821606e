"""The picker as an Envoy external processor (`envoy.service.ext_proc.v3`): one gRPC call
per HTTP request and filter, on the picker's own gRPC server (grpc_calls.py).

The `pick` filter's stream carries the request: its headers, then its body, in the
BUFFERED mode (the whole body in one message; the answer comes with it) or the
FULL_DUPLEX_STREAMED mode (the body in chunks that Envoy leaves with the picker, which
sends it back, rewritten or not, after its headers' answer). The `observe` filter's
stream carries the response, in Envoy's observability mode: nothing is answered. A
gateway's own single filter may send the response to the pick's stream instead: it is
answered there, and watched there (`_Pick`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine, Generator
from typing import Any

from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.type.v3 import http_status_pb2
from google.protobuf import duration_pb2

from fleetgate.epp.answers import (
    body_parts,
    header_options,
    pick_answer,
    removed_headers,
    streamed_body,
    token_metadata,
)
from fleetgate.epp.evidence import ResponseWatch
from fleetgate.epp.grpc_calls import INTERNAL, Call, Handler, Method
from fleetgate.epp.picker import CLIENT_CREDENTIALS, Pick, Picker, Refusal
from fleetgate.epp.protocol import (
    EXT_PROC_SERVICE,
    LB_NAMESPACE,
    PICK_NAMESPACE,
    PICK_TOKEN,
    REQUEST_ID,
    ROLE_HEADER,
    ROLE_OBSERVE,
    ROLE_PICK,
    SERVED,
    SUBSET,
    SUBSET_NAMESPACE,
    UPSTREAM_ADDRESS,
    WATCHED_RESPONSE_HEADERS,
)
from fleetgate.epp.rename import AnswerRename
from fleetgate.execute.rewrite import rewriter_for

log = logging.getLogger("fleetgate.epp")

FULL_DUPLEX = processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED
STREAMED = processing_mode_pb2.ProcessingMode.STREAMED
NO_BODY = processing_mode_pb2.ProcessingMode.NONE
PROCESS_PATH = f"/{EXT_PROC_SERVICE}/Process"
ROLE_HEADER_BYTES = ROLE_HEADER.encode()
ROLE_OBSERVE_BYTES = ROLE_OBSERVE.encode()
ROLE_PICK_BYTES = ROLE_PICK.encode()


def _headers(msg: pb.HttpHeaders) -> list[tuple[bytes, bytes]]:
    """Envoy's headers as (lower-case name, value) bytes, as ASGI gives them."""
    return [
        (h.key.lower().encode("latin-1"), h.raw_value or h.value.encode("latin-1"))
        for h in msg.headers.headers
    ]


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


# the response headers the answer's evidence needs
_WATCHED = frozenset(WATCHED_RESPONSE_HEADERS)


def _watched(msg: pb.HttpHeaders) -> dict[str, str]:
    """The few response headers the evidence reads (not all of them, as `_headers` gives)."""
    out = {}
    for h in msg.headers.headers:
        key = h.key  # lower-case as Envoy writes every name; another name is lowered
        if key not in _WATCHED:
            key = key.lower()
            if key not in _WATCHED:
                continue
        raw = h.raw_value
        out[key] = raw.decode("latin-1") if raw else h.value
    return out


def _see_headers(
    watch: ResponseWatch, request: pb.ProcessingRequest, data: bytes, upstream: str | None
) -> None:
    """The answer's status and framing from the response headers `request` (`data`, its
    bytes), and the endpoint that served it: the data plane's header, else its forwarded
    metadata (`_served`), else the `upstream` address Envoy sent, else, later, the first
    one picked."""
    headers = _watched(request.response_headers)
    status = headers.get(":status", "0")
    watch.served = headers.get(SERVED) or _served(request, data) or upstream
    watch.headers(
        int(status) if status.isdigit() else 0,
        headers.get("content-type", ""),
        headers.get("retry-after"),
    )


OVERWRITE = base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD


def _set_headers(
    mutation: pb.HeaderMutation, headers: list[tuple[str, str]], remove: tuple[str, ...] = ()
) -> None:
    """Fills `mutation` in place (building sub-messages and copying them in costs twice)."""
    if remove:
        mutation.remove_headers.extend(remove)
    add = mutation.set_headers.add
    for key, value in headers:
        option = add(append_action=OVERWRITE)
        option.header.key = key
        option.header.raw_value = value.encode("latin-1")


def _choice(data: bytes, request: pb.ProcessingRequest) -> str | None:
    """The `request` choice the message carries. Envoy writes a message's fields in their
    numbers' order, the choice first: its first tag says which (asking the message costs
    more); a message that starts otherwise is asked."""
    kind = _CHOICES.get(data[:1])
    return kind if kind is not None else request.WhichOneof("request")


# ProcessingRequest's `request` choices, by their tag (field number << 3 | 2)
_CHOICES = {
    bytes((field.number << 3 | 2,)): field.name
    for field in pb.ProcessingRequest.DESCRIPTOR.oneofs_by_name["request"].fields
}
_SUBSET_BYTES = SUBSET_NAMESPACE.encode()


def _body_ends(phase: str) -> frozenset[bytes]:
    """The messages that carry only a body's end, exactly as Envoy writes them: no data, the
    end flag, an empty metadata context or none, the observability flag or not. Envoy sends
    one after the data of most bodies; known by its bytes, it needs no decoding (any other
    message is decoded)."""
    ends = set()
    for metadata in (False, True):
        for observed in (False, True):
            message = pb.ProcessingRequest(observability_mode=observed)
            getattr(message, phase).end_of_stream = True
            if metadata:
                message.metadata_context.SetInParent()
            ends.add(message.SerializeToString())
    return frozenset(ends)


REQUEST_BODY_ENDS = _body_ends("request_body")
RESPONSE_BODY_ENDS = _body_ends("response_body")


def _forwarded_string(request: pb.ProcessingRequest, namespace: str, key: str) -> str | None:
    """A string the data plane forwards in the message's metadata: `namespace` → `key`."""
    fields = request.metadata_context.filter_metadata.get(namespace)
    value = fields.fields.get(key) if fields is not None else None
    return value.string_value or None if value is not None else None


def _served(request: pb.ProcessingRequest, data: bytes) -> str | None:
    """The endpoint that served, as a GIE data plane reports it with the response: in the
    metadata it forwards, `envoy.lb` → `x-gateway-destination-endpoint-served` (read only
    when the message's bytes hold the name)."""
    if _SERVED_BYTES not in data:
        return None
    return _forwarded_string(request, LB_NAMESPACE, SERVED)


_SERVED_BYTES = SERVED.encode()
_PICK_BYTES = PICK_NAMESPACE.encode()


def _subset(request: pb.ProcessingRequest) -> frozenset[str] | None:
    """The data plane's candidate endpoints (`envoy.lb.subset_hint`), when it sends some."""
    hint = request.metadata_context.filter_metadata.get(SUBSET_NAMESPACE)
    if hint is None or SUBSET not in hint.fields:
        return None
    value = hint.fields[SUBSET]
    if value.HasField("list_value"):
        return frozenset(v.string_value for v in value.list_value.values)
    return frozenset(e.strip() for e in value.string_value.split(",") if e.strip())


def _refused(refusal: Refusal) -> pb.ProcessingResponse:
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in refusal.headers]
    headers.append(("content-type", "application/json"))
    answer = pb.ProcessingResponse(
        immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=refusal.status),
            body=refusal.body,
            details="fleetgate_refused",
        )
    )
    _set_headers(answer.immediate_response.headers, headers)
    return answer


# the client's credentials, removed from every request the pick sends on
_REMOVED = removed_headers(CLIENT_CREDENTIALS)

# the answers that carry nothing: built once
HEADERS_PASS = pb.ProcessingResponse(request_headers=pb.HeadersResponse()).SerializeToString()
TRAILERS_PASS = pb.ProcessingResponse(request_trailers=pb.TrailersResponse()).SerializeToString()
RESPONSE_HEADERS_PASS = pb.ProcessingResponse(
    response_headers=pb.HeadersResponse()
).SerializeToString()
RESPONSE_BODY_PASS = pb.ProcessingResponse(response_body=pb.BodyResponse()).SerializeToString()
# a renamed answer's headers: its length changes (the data plane sends it chunked)
RESPONSE_HEADERS_UNSIZED = pb.ProcessingResponse(
    response_headers=pb.HeadersResponse(
        response=pb.CommonResponse(
            header_mutation=pb.HeaderMutation(remove_headers=["content-length"])
        )
    )
).SerializeToString()
RESPONSE_TRAILERS_PASS = pb.ProcessingResponse(
    response_trailers=pb.TrailersResponse()
).SerializeToString()


def _pick_answer(pick: Pick, in_body: bool) -> bytes:
    """The pick's answer. Most picks answer alike: the same endpoints, timeout and no
    header of their own (the request's id is the one Envoy sent, the body is not
    rewritten, or only its length shows in the headers' answer); those answers are kept,
    a bounded number of them."""
    endpoints = pick.endpoints
    destination = ",".join(endpoints)
    body = pick.body
    key = None
    if pick.ex.id_given and (body is None or not in_body):
        timeout = pick.handed[0][0].deployment.provider.timeouts.total
        key = (in_body, destination, timeout, None if body is None else len(body))
        answer = _ANSWERS.get(key)
        if answer is not None:
            return answer
    mutation = header_options(pick.header_mutations(endpoints, destination))
    answer = pick_answer(in_body, mutation + _REMOVED, destination, body)
    if key is not None:
        if len(_ANSWERS) >= _KEPT_ANSWERS:
            _ANSWERS.clear()
        _ANSWERS[key] = answer
    return answer


def _responses(pick: Pick, body: bytes, step: str, parts: int) -> list[bytes]:
    answer = _pick_answer(pick, step == "body")
    if pick.key and pick.key != pick.ex.request_id:  # claimed by its token, not its id
        answer += token_metadata(pick.key)
    if step == "streamed":  # the headers' answer, then each of the body's `parts`
        return [answer, *body_parts(parts, pick.body)]
    if step != "duplex":
        return [answer]
    # full duplex: the headers' answer, then the body, whole, as Envoy left it
    return [answer, streamed_body(pick.body if pick.body is not None else body)]


def _keep_waiting(seconds: float) -> bytes:
    """Asks Envoy to wait `seconds` for the answer now due (`override_message_timeout`)."""
    answer = _WAITS.get(seconds)
    if answer is None:
        whole = int(seconds)
        wait = duration_pb2.Duration(seconds=whole, nanos=int((seconds - whole) * 1e9))
        answer = _WAITS[seconds] = pb.ProcessingResponse(
            override_message_timeout=wait
        ).SerializeToString()
    return answer


_WAITS: dict[float, bytes] = {}


_ANSWERS: dict[tuple[bool, str, float, int | None], bytes] = {}
_KEPT_ANSWERS = 512


class _Pick:
    """The `pick` filter's call: the request's headers and body in, the pick out.

    `fleetgate envoy-config`'s pick filter (its calls carry the pick role) sends no
    response here: the call ends with the pick, and the observe call claims it. A gateway's
    own ext_proc filter (no role: GIE gateways, llm-d's router chart) may send the response
    to this call, its body in full-duplex mode most often, or only its headers, or nothing:
    the call is then kept after the pick for as long as Envoy keeps it, each response
    message is answered as its mode asks (a full-duplex chunk is sent straight back) and
    the answer's evidence is read from what comes, as the observe call reads it. The
    pick's in-flight count ends with the call, whatever came."""

    __slots__ = (
        "bodiless",
        "busy",
        "call",
        "chunks",
        "done",
        "duplex",
        "echo",
        "headers",
        "held",
        "later",
        "parts",
        "picker",
        "received",
        "rename",
        "streamed",
        "subset",
        "watch",
    )

    def __init__(self, picker: Picker, call: Call) -> None:
        self.picker = picker
        self.call = call
        self.headers: list[tuple[bytes, bytes]] = []
        self.chunks: list[bytes] = []  # the body's chunks so far
        self.received = 0  # their bytes
        self.parts = 0  # the body's messages so far (STREAMED mode answers each)
        self.duplex = False
        # STREAMED, Envoy not waiting for the headers' answer: the pick is that answer
        self.streamed = False
        self.subset: frozenset[str] | None = None
        self.done = False  # the answer is given (or being made)
        self.busy = False  # the answer is being made: what follows waits for it
        self.later: list[bytes] = []
        # the response, when the data plane sends it to this call: what is seen of it, the
        # pick it belongs to (once given) and whether its chunks are sent back (full duplex)
        self.watch: ResponseWatch | None = None
        self.held: Pick | None = None
        self.echo = False
        self.bodiless = False  # the response's headers come here, never its body
        self.rename: AnswerRename | None = None  # the client's model name put back

    def message(self, data: bytes) -> None:
        if data in REQUEST_BODY_ENDS:  # the body's end alone
            self.parts += 1
            self._body_ended()
            return
        request = pb.ProcessingRequest.FromString(data)
        kind = _choice(data, request)
        if kind == "request_headers":
            headers = request.request_headers
            self.headers = _headers(headers)
            config = request.protocol_config
            self.duplex = config.request_body_mode == FULL_DUPLEX
            self.streamed = (
                config.request_body_mode == STREAMED
                and config.send_body_without_waiting_for_header_response
            )
            if self.call.metadata.get(ROLE_HEADER_BYTES) != ROLE_PICK_BYTES:
                # a gateway's own filter: what comes of the response comes here
                self.watch = ResponseWatch()
                self.echo = config.response_body_mode == FULL_DUPLEX
                self.bodiless = config.response_body_mode == NO_BODY
            # a hint's namespace is in the bytes of a message that carries one
            self.subset = _subset(request) if _SUBSET_BYTES in data else None
            if headers.end_of_stream:  # no body at all
                self._answer(b"", "headers")
            elif not (self.duplex or self.streamed):
                self._send(HEADERS_PASS)
        elif kind == "request_body":
            self.parts += 1
            chunk = request.request_body
            piece = chunk.body
            if piece:
                self.chunks.append(piece)
                self.received += len(piece)
            if chunk.end_of_stream:
                self._body_ended()
            elif self.streamed and not self.done:
                self._more_to_come()
        elif kind == "request_trailers":
            if not self.done:  # a full-duplex body ends with its trailers
                self._answer(self._whole(), "duplex")
            self._send(TRAILERS_PASS)
        elif kind == "response_headers":
            response = request.response_headers
            reply = RESPONSE_HEADERS_PASS
            held, watch = self.held, self.watch
            if held is not None and watch is not None:
                upstream = _attributes(request)[1] if request.attributes else None
                _see_headers(watch, request, data, upstream)
                if self.bodiless:  # all that will come of it: its end, as far as seen here
                    watch.ended = True
                if self.echo and 0 < watch.status < 300:
                    rewriter = rewriter_for(held.upstream_model, held.profile.model)
                    if not rewriter.identity:  # renamed: its length is no longer known
                        self.rename = AnswerRename(rewriter, watch.framing)
                        reply = RESPONSE_HEADERS_UNSIZED
            if response.end_of_stream:
                self._response_ended(reply)
            else:
                self._send(reply)
        elif kind == "response_body":
            chunk = request.response_body
            body, end = chunk.body, chunk.end_of_stream
            if self.held is not None and self.watch is not None:
                self.watch.chunk(body)
            if not self.echo:
                reply = RESPONSE_BODY_PASS
            elif self.rename is None:
                reply = streamed_body(body, end, response=True)
            else:  # full duplex: what is not whole yet is sent back later, with the rest
                body = self.rename.chunk(body, end)
                if not body and not end:
                    return
                reply = streamed_body(body, end, response=True)
            if end:
                self._response_ended(reply)
            else:
                self._send(reply)
        elif kind == "response_trailers":  # the body ended with them
            if self.rename is not None and (rest := self.rename.chunk(b"", True)):
                self._send(streamed_body(rest, False, response=True))  # what was held
            self._response_ended(RESPONSE_TRAILERS_PASS)

    def _body_ended(self) -> None:
        """The body is whole: the pick is made with it, unless it was made already."""
        if not self.done:
            step = "duplex" if self.duplex else "streamed" if self.streamed else "body"
            self._answer(self._whole(), step)

    def _more_to_come(self) -> None:
        """A STREAMED body's part, more to come: Envoy times each part's answer, which is
        due only with the pick, so the picker asks it to wait for the next part as long as
        the proxy waits for a body. A body already over the limit is refused now (the pick
        refuses it): Envoy may hold the rest back once its buffer is full."""
        server = self.picker.pipeline.holder.fleet.config.server
        if self.received > server.max_body_bytes:
            self._body_ended()
        else:
            self.call.send(_keep_waiting(server.body_timeout_seconds))

    def _whole(self) -> bytes:
        """The body so far: most often one chunk, handed on without a copy."""
        chunks = self.chunks
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _send(self, response: bytes) -> None:
        if self.busy:
            self.later.append(response)
        else:
            self.call.send(response)

    def _answer(self, body: bytes, step: str) -> None:
        self.done = self.busy = True
        # answered in this loop turn when the plan needs no I/O (no exact count, no store):
        # its first step runs here; only a pick that suspends goes on in a task of its own
        pick = self._pick(body, step)
        try:
            waits_on = pick.send(None)
        except StopIteration:
            return
        task = asyncio.get_running_loop().create_task(_rest(pick, waits_on))
        _RUNNING.add(task)
        task.add_done_callback(_RUNNING.discard)

    async def _pick(self, body: bytes, step: str) -> None:
        headers = self.headers
        path = _header(headers, b":path") or "/"
        held = None
        try:
            try:
                pick = await self.picker.pick(
                    path, headers, body, self.subset, claimable=self.watch is None
                )
            except Refusal as refusal:
                responses = [_refused(refusal).SerializeToString()]
            else:
                responses = _responses(pick, body, step, self.parts)
                held = pick if self.watch is not None else None
        except Exception:
            log.exception("the pick failed")
            self.call.finish(INTERNAL, "the picker failed on this request")
            return
        self.busy = False
        responses += self.later
        self.later.clear()
        if held is not None:  # the response comes to this call: it stays open for it
            self.held = held
            self.call.send(*responses)
            return
        # the pick is all this call is for: ended now, Envoy need not end it at the end of
        # the request (and does not send the response phases a gateway may ask for)
        self.call.answer(*responses)

    def _response_ended(self, reply: bytes) -> None:
        """The response's last message, answered with `reply`: the call ends with it, and
        the answer's evidence is fed."""
        self.call.answer(reply)
        if self.watch is not None:
            self.watch.ended = True
        self._settle()

    def _settle(self) -> None:
        pick, self.held = self.held, None
        if pick is None or self.watch is None:
            return
        try:
            if self.watch.headers_at is None:  # nothing of the answer came: the client left
                self.picker.give_up(pick)
            else:
                self.picker.finish(pick, self.watch)
        except Exception:
            log.exception("request %s: its answer could not be recorded", pick.ex.request_id)

    def end(self) -> None:
        self._settle()  # Envoy ended it before the response ended: what was seen is all
        if not self.busy:  # Envoy ended it before the request was whole
            self.call.finish()

    def cancel(self) -> None:
        self.later.clear()
        self._settle()


class _Observe:
    """The `observe` filter's call: the response, shown in observability mode (nothing is
    answered, nothing waits); the call ends once the answer's evidence is in."""

    __slots__ = ("call", "pick", "picker", "watch")

    def __init__(self, picker: Picker, call: Call) -> None:
        self.picker = picker
        self.call = call
        self.pick: Pick | None = None
        self.watch = ResponseWatch()

    def message(self, data: bytes) -> None:
        if data in RESPONSE_BODY_ENDS:  # the body's end alone
            if self.pick is not None:
                self._ended()
            return
        request = pb.ProcessingRequest.FromString(data)
        kind = _choice(data, request)
        if kind == "response_headers":
            request_id, upstream = _attributes(request)
            # the pick's claim token, when the observe filter forwards one, else the id
            key = (
                _forwarded_string(request, PICK_NAMESPACE, PICK_TOKEN)
                if _PICK_BYTES in data
                else request_id
            )
            self.pick = self.picker.claim(key) if key else None
            if self.pick is None:
                # not a picked request (or its pick already given up on)
                self.call.finish(lazy=True)
                return
            _see_headers(self.watch, request, data, upstream)
            if request.response_headers.end_of_stream:
                self._ended()
        elif kind == "response_body" and self.pick is not None:
            chunk = request.response_body
            self.watch.chunk(chunk.body)
            if chunk.end_of_stream:
                self._ended()

    def _ended(self) -> None:
        """The answer's end came: what was seen of it is whole."""
        self.watch.ended = True
        self._finish()

    def _finish(self) -> None:
        self.call.finish(lazy=True)  # Envoy waits for nothing from it
        self._feed()

    def _feed(self) -> None:
        """The answer's evidence, as far as it was seen, to its pick (once)."""
        pick, self.pick = self.pick, None
        if pick is None:
            return
        try:
            self.picker.finish(pick, self.watch)
        except Exception:
            log.exception("request %s: its answer could not be recorded", pick.ex.request_id)

    def end(self) -> None:
        self._finish()

    def cancel(self) -> None:
        self._feed()  # what was seen of the answer is all there will be


_RUNNING: set[asyncio.Task[None]] = set()  # the picks being made (a task needs a holder)


def _resume(coro: Coroutine[Any, Any, None], waits_on: Any) -> Generator[Any, Any, None]:
    """The rest of a coroutine already stepped once and suspended on `waits_on`: what its
    task is told (a future's result, a cancellation) is passed on to it."""
    while True:
        try:
            sent = yield waits_on
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # a cancellation, thrown in by the task
            try:
                waits_on = coro.throw(exc)
            except StopIteration:
                return
        else:
            try:
                waits_on = coro.send(sent)
            except StopIteration:
                return


class _Suspended:
    __slots__ = ("coro", "waits_on")

    def __init__(self, coro: Coroutine[Any, Any, None], waits_on: Any) -> None:
        self.coro, self.waits_on = coro, waits_on

    def __await__(self) -> Generator[Any, Any, None]:
        return _resume(self.coro, self.waits_on)


async def _rest(coro: Coroutine[Any, Any, None], waits_on: Any) -> None:
    await _Suspended(coro, waits_on)


def methods(picker: Picker) -> dict[str, Method]:
    """The ext_proc service's method: which filter a call is for says how it is handled."""

    def process(call: Call) -> Handler:
        if call.metadata.get(ROLE_HEADER_BYTES) == ROLE_OBSERVE_BYTES:
            return _Observe(picker, call)
        return _Pick(picker, call)

    return {PROCESS_PATH: process}


# the key Envoy files the attributes it sends under: the ext_proc filter's own name
ATTRIBUTES_KEY = "envoy.filters.http.ext_proc"


def _attributes(request: pb.ProcessingRequest) -> tuple[str | None, str | None]:
    """The request id and the upstream that answered, as attributes Envoy sent with the
    response headers (read in one pass; under the key Envoy uses, else under any)."""
    request_id = upstream = None
    attributes = request.attributes
    known = attributes.get(ATTRIBUTES_KEY)
    for struct in (known,) if known is not None else attributes.values():
        fields = struct.fields
        if request_id is None:
            value = fields.get(REQUEST_ID)
            request_id = value.string_value or None if value is not None else None
        if upstream is None:
            value = fields.get(UPSTREAM_ADDRESS)
            upstream = value.string_value or None if value is not None else None
    return request_id, upstream
