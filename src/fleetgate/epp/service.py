"""The picker as an Envoy external processor (`envoy.service.ext_proc.v3`), on grpcio's
asyncio API: one gRPC stream per HTTP request and filter.

The `pick` filter's stream carries the request: its headers, then its body, in the
BUFFERED mode (the whole body in one message; the answer comes with it) or the
FULL_DUPLEX_STREAMED mode (the body in chunks that Envoy leaves with the picker, which
sends it back, rewritten or not, after its headers' answer). The `observe` filter's
stream carries the response, in Envoy's observability mode: nothing is answered.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from envoy.type.v3 import http_status_pb2
from google.protobuf import struct_pb2

from fleetgate.epp.evidence import ResponseWatch
from fleetgate.epp.picker import CLIENT_CREDENTIALS, Pick, Picker, Refusal
from fleetgate.epp.protocol import (
    DESTINATION,
    LB_NAMESPACE,
    REQUEST_ID,
    ROLE_HEADER,
    ROLE_OBSERVE,
    SERVED,
    SUBSET,
    SUBSET_NAMESPACE,
    UPSTREAM_ADDRESS,
)

log = logging.getLogger("fleetgate.epp")

FULL_DUPLEX = processing_mode_pb2.ProcessingMode.FULL_DUPLEX_STREAMED


def _headers(msg: pb.HttpHeaders) -> list[tuple[bytes, bytes]]:
    """Envoy's headers as (lower-case name, value) bytes, as ASGI gives them."""
    out = []
    for h in msg.headers.headers:
        value = h.raw_value if h.raw_value else h.value.encode("latin-1")
        out.append((h.key.lower().encode("latin-1"), value))
    return out


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("latin-1")
    return None


def _mutation(headers: list[tuple[str, str]], remove: tuple[str, ...] = ()) -> pb.HeaderMutation:
    return pb.HeaderMutation(
        remove_headers=remove,
        set_headers=[
            base_pb2.HeaderValueOption(
                header=base_pb2.HeaderValue(key=k, raw_value=v.encode("latin-1")),
                append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
            )
            for k, v in headers
        ],
    )


def _subset(request: pb.ProcessingRequest) -> frozenset[str] | None:
    """The data plane's candidate endpoints (`envoy.lb.subset_hint`), when it sends some."""
    hint = request.metadata_context.filter_metadata.get(SUBSET_NAMESPACE)
    if hint is None or SUBSET not in hint.fields:
        return None
    value = hint.fields[SUBSET]
    if value.HasField("list_value"):
        return frozenset(v.string_value for v in value.list_value.values)
    return frozenset(e.strip() for e in value.string_value.split(",") if e.strip())


def _metadata(pick: Pick) -> struct_pb2.Struct:
    meta = struct_pb2.Struct()
    meta.update({LB_NAMESPACE: {DESTINATION: ",".join(pick.endpoints)}})
    return meta


def _refused(refusal: Refusal) -> pb.ProcessingResponse:
    headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in refusal.headers]
    headers.append(("content-type", "application/json"))
    return pb.ProcessingResponse(
        immediate_response=pb.ImmediateResponse(
            status=http_status_pb2.HttpStatus(code=refusal.status),
            headers=_mutation(headers),
            body=refusal.body,
            details="fleetgate_refused",
        )
    )


class ExternalProcessor(pb_grpc.ExternalProcessorServicer):
    def __init__(self, picker: Picker) -> None:
        self.picker = picker

    async def Process(  # the service's method name
        self, request_iterator: AsyncIterator[pb.ProcessingRequest], context: Any
    ) -> AsyncIterator[pb.ProcessingResponse]:
        role = dict(context.invocation_metadata()).get(ROLE_HEADER)
        if role == ROLE_OBSERVE:
            await self._observe(request_iterator)
            return
        async for response in self._pick(request_iterator):
            yield response

    async def _pick(
        self, requests: AsyncIterator[pb.ProcessingRequest]
    ) -> AsyncIterator[pb.ProcessingResponse]:
        headers: list[tuple[bytes, bytes]] = []
        body = bytearray()
        duplex = False
        subset: frozenset[str] | None = None
        done = False
        async for request in requests:
            kind = request.WhichOneof("request")
            if kind == "request_headers":
                headers = _headers(request.request_headers)
                duplex = request.protocol_config.request_body_mode == FULL_DUPLEX
                subset = _subset(request)
                if request.request_headers.end_of_stream:  # no body at all
                    done = True
                    async for out in self._answer(headers, b"", subset, "headers"):
                        yield out
                elif not duplex:
                    yield pb.ProcessingResponse(request_headers=pb.HeadersResponse())
            elif kind == "request_body":
                body += request.request_body.body
                if request.request_body.end_of_stream and not done:
                    done = True
                    step = "duplex" if duplex else "body"
                    async for out in self._answer(headers, bytes(body), subset, step):
                        yield out
            elif kind == "request_trailers":
                if not done:  # a full-duplex body ends with its trailers
                    done = True
                    async for out in self._answer(headers, bytes(body), subset, "duplex"):
                        yield out
                yield pb.ProcessingResponse(request_trailers=pb.TrailersResponse())
            elif kind == "response_headers":  # not asked for; answered all the same
                yield pb.ProcessingResponse(response_headers=pb.HeadersResponse())
            elif kind == "response_body":
                yield pb.ProcessingResponse(response_body=pb.BodyResponse())

    async def _answer(
        self,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        subset: frozenset[str] | None,
        step: str,
    ) -> AsyncIterator[pb.ProcessingResponse]:
        path = _header(headers, b":path") or "/"
        try:
            pick = await self.picker.pick(path, headers, body, subset)
        except Refusal as refusal:
            yield _refused(refusal)
            return
        mutation = _mutation(pick.header_mutations(), CLIENT_CREDENTIALS)
        common = pb.CommonResponse(header_mutation=mutation)
        meta = _metadata(pick)
        if step == "headers":
            yield pb.ProcessingResponse(
                request_headers=pb.HeadersResponse(response=common), dynamic_metadata=meta
            )
        elif step == "body":
            if pick.body is not None:
                common.body_mutation.body = pick.body
            yield pb.ProcessingResponse(
                request_body=pb.BodyResponse(response=common), dynamic_metadata=meta
            )
        else:  # full duplex: the headers' answer, then the body, whole, as Envoy left it
            yield pb.ProcessingResponse(
                request_headers=pb.HeadersResponse(response=common), dynamic_metadata=meta
            )
            streamed = pb.StreamedBodyResponse(
                body=pick.body if pick.body is not None else body, end_of_stream=True
            )
            yield pb.ProcessingResponse(
                request_body=pb.BodyResponse(
                    response=pb.CommonResponse(
                        body_mutation=pb.BodyMutation(streamed_response=streamed)
                    )
                )
            )

    async def _observe(self, requests: AsyncIterator[pb.ProcessingRequest]) -> None:
        pick: Pick | None = None
        watch = ResponseWatch()
        try:
            async for request in requests:
                kind = request.WhichOneof("request")
                if kind == "response_headers":
                    request_id = _attribute(request, REQUEST_ID)
                    pick = self.picker.claim(request_id) if request_id else None
                    if pick is None:
                        return  # not a picked request (or its pick already given up on)
                    headers = _headers(request.response_headers)
                    status = _header(headers, b":status") or "0"
                    served = _header(headers, SERVED.encode())
                    watch.served = served or _attribute(request, UPSTREAM_ADDRESS)
                    watch.headers(
                        int(status) if status.isdigit() else 0,
                        _header(headers, b"content-type") or "",
                        _header(headers, b"retry-after"),
                    )
                    if request.response_headers.end_of_stream:
                        break
                elif kind == "response_body" and pick is not None:
                    watch.chunk(request.response_body.body)
                    if request.response_body.end_of_stream:
                        break
        finally:
            if pick is not None:
                try:
                    self.picker.finish(pick, watch)
                except Exception:
                    request_id = pick.ex.request_id
                    log.exception("request %s: its answer could not be recorded", request_id)


def _attribute(request: pb.ProcessingRequest, name: str) -> str | None:
    """An attribute Envoy sent with the message (the upstream that answered, the request id)."""
    for attributes in request.attributes.values():
        value = attributes.fields.get(name)
        if value is not None and value.string_value:
            return value.string_value
    return None


def add_to_server(server: grpc.aio.Server, picker: Picker) -> None:
    pb_grpc.add_ExternalProcessorServicer_to_server(ExternalProcessor(picker), server)
