"""A request record as spans: the request's SERVER span, its routing (and exact count), a
CLIENT span per upstream attempt (and its translation), with the ids and times the request
path noted. Numbers and ids only: never a prompt, a completion or a secret."""

from __future__ import annotations

from collections.abc import Callable
from functools import lru_cache
from urllib.parse import urlsplit

from fleetgate.context.truncation import CUT_SHORT_NOTE
from fleetgate.execute.outcome import CUT_SHORT, Attempt
from fleetgate.fleet import Deployment, Fleet, Provider
from fleetgate.record.genai import GATEWAY_WIRE, operation_of, provider_name
from fleetgate.record.recorder import RequestRecord
from fleetgate.telemetry import otlp
from fleetgate.telemetry.otlp import SPAN_ATTR, cached_attribute, string_head
from fleetgate.trace_context import NUMBER, TraceContext, new_span_bytes

ROUTE_SPAN = "fleetgate.route"
COUNT_SPAN = "fleetgate.count_tokens"
TRANSLATE_SPAN = "fleetgate.translate"
# refine outcomes that called a counter (the others decided without one)
_COUNTED = frozenset({"exact", "timeout", "failed"})


_ROUTE_HEAD = otlp.span_head(ROUTE_SPAN, otlp.SPAN_INTERNAL)
_COUNT_HEAD = otlp.span_head(COUNT_SPAN, otlp.SPAN_INTERNAL)
_TRANSLATE_HEAD = otlp.span_head(TRANSLATE_SPAN, otlp.SPAN_INTERNAL)


@lru_cache(maxsize=1024)
def _server_of(base_url: str) -> tuple[str | None, int | None]:
    """(server.address, server.port) of a provider's base URL."""
    try:
        url = urlsplit(base_url)
        port = url.port or (443 if url.scheme == "https" else 80)
    except ValueError:
        return None, None
    return url.hostname, port


@lru_cache(maxsize=64)
def _server_head(route: str) -> bytes:
    """The SERVER span's name and kind, per route."""
    return otlp.span_head(f"POST {route}", otlp.SPAN_SERVER)


def _attr(key: str, value: str | float | bool | tuple[str, ...] | None) -> bytes:
    """An attribute whose values repeat (the fleet's ids, counts, settings): encoded once."""
    return b"" if value is None else cached_attribute(SPAN_ATTR, key, value)


class SpanBuilder:
    """Turns records into encoded spans (`otlp.span` messages)."""

    def __init__(self, fleet: Callable[[], Fleet]) -> None:
        self.fleet = fleet

    def spans(self, record: RequestRecord) -> list[bytes]:
        trace = record.trace
        assert trace is not None and trace.sampled
        ids = trace.ids or bytes.fromhex(trace.trace_id + trace.span_id)
        trace_head = b"\x0a\x10" + ids[:16]  # its `otlp.trace_field`
        server_id = ids[16:]
        latency_ns = int(record.latency * 1e9)
        # the record's wall clock is its end's (taken as it was made): the start is that less
        # the latency, and every mark of the request's own clock is placed from there
        end = int(record.time * 1e9)
        start = trace.wall_ns = end - latency_ns
        route = trace.path
        resolution = record.notes.get("resolution")  # the record's `virtual_model`, inline
        virtual = resolution.get("virtual_model") if type(resolution) is dict else None
        head, attrs = _server_block(
            route,
            record.status,
            record.endpoint,
            record.resolution,
            record.deployment_id,
            record.provider_id,
            len(record.attempts),
            record.error_code,
            record.requested_model,
            record.client_key_id,
            virtual if type(virtual) is str else None,
        )
        request_id = record.request_id.encode()  # its `otlp.string_attribute`, inline
        attrs += string_head(SPAN_ATTR, "fleetgate.request.id", len(request_id)) + request_id
        out = [_server_span(trace, trace_head, server_id, head, start, end, attrs, record.status)]
        child = b"\x22\x08" + server_id  # the parent field of the server span's children
        if "plan" in trace.marks:
            self._routing_spans(out, record, trace, trace_head, child, end)
        deployments: dict[str, Deployment] | None = None
        previous: Attempt | None = None
        for attempt in record.attempts:
            if attempt.span_id is not None and attempt.wire != GATEWAY_WIRE:
                if deployments is None:
                    deployments = self.fleet().deployments
                dep = deployments.get(attempt.deployment_id)
                self._attempt_spans(
                    out,
                    record,
                    trace,
                    attempt,
                    previous,
                    dep.provider if dep is not None else None,
                    trace_head,
                    child,
                )
            previous = attempt
        return out

    def _routing_spans(
        self,
        out: list[bytes],
        record: RequestRecord,
        trace: TraceContext,
        trace_head: bytes,
        parent: bytes,
        end: int,
    ) -> None:
        marks = trace.marks
        notes = record.notes
        resolution = notes.get("resolution")
        tier = resolution.get("tier") if type(resolution) is dict else None
        affinity = notes.get("affinity")
        refine = notes.get("context_refine")
        context_tier, exact = notes.get("context_tier"), notes.get("context_exact")
        result = affinity.get("result") if type(affinity) is dict else None
        attrs = _route_block(
            record.resolution,
            tier if type(tier) is str else None,
            context_tier if type(context_tier) is str else None,
            exact if type(exact) is bool else None,
            refine if type(refine) is str and refine else "estimate",
            result if type(result) is str else None,
            trace.kept or None,
        )
        tokens = notes.get("context_estimate")
        estimated = notes.get("context_estimated")
        if type(tokens) is not int:
            tokens = None
        attrs += _context_counts(estimated if type(estimated) is int else None, tokens)
        if record.dropped:
            dropped = [
                f"{d.get('deployment')}: {d.get('filter')}: {d.get('reason')}"
                for d in record.dropped
            ]
            attrs += otlp.field(SPAN_ATTR, otlp.key_value("fleetgate.candidates.dropped", dropped))
        route_id = new_span_bytes()
        wall, perf = trace.wall_ns, trace.perf
        planned = marks.get("planned")
        planned_ns = wall + int((planned - perf) * 1e9) if planned is not None else end
        out.append(
            otlp.span(
                trace_head,
                route_id,
                parent,
                _ROUTE_HEAD,
                wall + int((marks["plan"] - perf) * 1e9),
                planned_ns,
                attrs,
                # failed before it planned: no attempt, an error
                otlp.STATUS_ERROR
                if planned is None and record.error_code is not None and not record.attempts
                else 0,
            )
        )
        if refine in _COUNTED and "count" in marks:
            count_attrs = _attr("fleetgate.context.source", refine) + _attr(
                "fleetgate.context.tokens", tokens
            )
            counted = marks.get("counted")
            out.append(
                otlp.span(
                    trace_head,
                    # the id the count's engine calls named as their parent
                    bytes.fromhex(trace.count_span) if trace.count_span else new_span_bytes(),
                    b"\x22\x08" + route_id,
                    _COUNT_HEAD,
                    wall + int((marks["count"] - perf) * 1e9),
                    wall + int((counted - perf) * 1e9) if counted is not None else planned_ns,
                    count_attrs,
                    0 if refine == "exact" else otlp.STATUS_ERROR,
                )
            )

    def _attempt_spans(
        self,
        out: list[bytes],
        record: RequestRecord,
        trace: TraceContext,
        a: Attempt,
        previous: Attempt | None,
        provider: Provider | None,
        trace_head: bytes,
        parent: bytes,
    ) -> None:
        assert a.span_id is not None
        params = trace.params
        if a.params:  # the route's own overrides are what the upstream got
            params = dict(params)
            for name in ("temperature", "top_p", "max_tokens"):
                value = a.params.get(name)
                if type(value) in NUMBER:
                    params[name] = value
        error = a.error_class
        notes = record.notes
        cut = error == CUT_SHORT or (
            CUT_SHORT_NOTE in notes
            and a is record.attempts[-1]
            and a.deployment_id == record.deployment_id  # the attempt that served
        )
        affinity = notes.get("affinity")
        max_tokens, temperature, top_p = (
            params.get("max_tokens"),
            params.get("temperature"),
            params.get("top_p"),
        )
        head, attrs = _attempt_block(
            record.endpoint,
            provider.kind if provider is not None else None,
            a.upstream_model,
            record.stream,
            provider.base_url if provider is not None else None,
            a.deployment_id,
            a.provider_id,
            a.wire,
            a.index,
            cut,
            error,
            a.status,
            max_tokens if type(max_tokens) is int else None,
            float(temperature) if type(temperature) in NUMBER else None,
            float(top_p) if type(top_p) in NUMBER else None,
            a.response_model,
            a.finish,
            previous.error_class if previous is not None else None,
            affinity.get("result")
            if type(affinity) is dict and affinity.get("deployment") == a.deployment_id
            else None,
        )
        attrs += _usage(a.prompt_tokens, a.completion_tokens, a.cache_read_tokens)
        if a.response_id is not None:
            attrs += otlp.string_attribute(SPAN_ATTR, "gen_ai.response.id", a.response_id)
        if record.stream and a.ttft is not None:
            attrs += otlp.double_attribute(SPAN_ATTR, "gen_ai.response.time_to_first_chunk", a.ttft)
        start = trace.wall_ns + int((a.began - trace.perf) * 1e9)
        span_id = a.span_id
        out.append(
            otlp.span(
                trace_head,
                span_id,
                parent,
                head,
                start,
                start + int(a.latency * 1e9),
                attrs,
                otlp.STATUS_ERROR if error and error != CUT_SHORT else 0,
            )
        )
        if a.translated is not None:
            out.append(
                otlp.span(
                    trace_head,
                    new_span_bytes(),
                    b"\x22\x08" + span_id,
                    _TRANSLATE_HEAD,
                    start,
                    start + int(a.translated * 1e9),
                    _attr("fleetgate.wire", a.wire),
                )
            )


def _server_span(
    trace: TraceContext,
    trace_head: bytes,
    server_id: bytes,
    head: bytes,
    start: int,
    end: int,
    attributes: bytes,
    status: int,
) -> bytes:
    """A request's SERVER span: a child of the client's span when it sent one."""
    parent_id, state = trace.parent_id, trace.state
    return otlp.span(
        trace_head,
        server_id,
        otlp.parent_field(bytes.fromhex(parent_id) if parent_id else None, state)
        if parent_id or state
        else b"",
        head,
        start,
        end,
        attributes,
        otlp.STATUS_ERROR if status >= 500 else 0,
    )


def endpoint_spans(
    trace: TraceContext,
    status: int,
    error: str | None,
    latency: float,
    attrs: tuple[tuple[str, object], ...],
) -> list[bytes]:
    """The SERVER span of a request to an endpoint that works for the client without being
    proxied (a token count, a routing explanation), with its exact count's span when it
    counted: ids, numbers and the fleet's names only, as every span."""
    trace_head = otlp.trace_field(bytes.fromhex(trace.trace_id))
    server_id = bytes.fromhex(trace.span_id)
    start = trace.wall_ns
    route = trace.path
    head = (
        ("http.request.method", "POST"),
        ("http.route", route),
        ("url.path", route),
        ("http.response.status_code", status),
        ("error.type", error),
    )
    end = start + int(latency * 1e9)
    attributes = otlp.attributes(SPAN_ATTR, head + attrs)
    head = _server_head(route)
    out = [_server_span(trace, trace_head, server_id, head, start, end, attributes, status)]
    marks = trace.marks
    if trace.count_span is not None and "count" in marks:
        counted = marks.get("counted", marks["count"])
        out.append(
            otlp.span(
                trace_head,
                bytes.fromhex(trace.count_span),
                b"\x22\x08" + server_id,
                _COUNT_HEAD,
                trace.wall(marks["count"]),
                trace.wall(counted),
                b"",
            )
        )
    return out


# Attribute blocks whose values repeat from request to request (the fleet's ids, statuses,
# settings), each encoded once: one cached call a span instead of one call an attribute.
# Not `typed`: no argument takes both a bool and a number (True and 1 would share a key).


@lru_cache(maxsize=1024)
def _server_block(
    route: str,
    status: int,
    endpoint: str,
    resolution: str,
    deployment: str | None,
    provider: str | None,
    attempts: int,
    error: str | None,
    requested_model: str,
    client_key: str | None,
    virtual_model: str | None,
) -> tuple[bytes, bytes]:
    """The SERVER span's name and kind, and its attributes but the request's id."""
    return _server_head(route), b"".join(
        (
            _attr("http.request.method", "POST"),
            _attr("http.route", route),
            _attr("url.path", route),
            _attr("http.response.status_code", status),
            _attr("fleetgate.endpoint", endpoint),
            _attr("fleetgate.resolution", resolution),
            _attr("fleetgate.deployment", deployment),
            _attr("fleetgate.provider", provider),
            _attr("fleetgate.attempts", attempts),
            _attr("error.type", error),
            _attr("fleetgate.requested_model", requested_model),
            _attr("fleetgate.client_key", client_key),
            _attr("fleetgate.virtual_model", virtual_model),
        )
    )


@lru_cache(maxsize=1024)
def _route_block(
    resolution: str,
    tier: str | None,
    context_tier: str | None,
    exact: bool | None,
    source: str,
    affinity: str | None,
    kept: tuple[str, ...] | None,
) -> bytes:
    """The routing span's attributes but the counts and the dropped candidates."""
    return b"".join(
        (
            _attr("fleetgate.resolution", resolution),
            _attr("fleetgate.tier", tier),
            _attr("fleetgate.context.tier", context_tier),
            _attr("fleetgate.context.exact", exact),
            _attr("fleetgate.context.source", source),
            _attr("fleetgate.affinity", affinity),
            _attr("fleetgate.candidates.kept", kept),
        )
    )


@lru_cache(maxsize=2048)
def _attempt_block(
    endpoint: str,
    kind: str | None,
    model: str,
    stream: bool,
    base_url: str | None,
    deployment: str,
    provider_id: str,
    wire: str | None,
    index: int,
    cut: bool,
    error: str | None,
    status: int | None,
    max_tokens: int | None,
    temperature: float | None,
    top_p: float | None,
    response_model: str | None,
    finish: str | None,
    fallback: str | None,
    affinity: str | None,
) -> tuple[bytes, bytes]:
    """A CLIENT span's name and kind, and its attributes but its counts, answer id and
    time to first chunk: those of its deployment, then those of how the attempt went."""
    head, shared = _deployment_block(
        endpoint, kind, model, stream, base_url, deployment, provider_id, wire
    )
    return head, b"".join(
        (
            shared,
            _attr("fleetgate.attempt.index", index),
            _attr("fleetgate.cut_short", cut),
            _attr("error.type", error),
            _attr("http.response.status_code", status),
            _attr("gen_ai.request.max_tokens", max_tokens),
            _attr("gen_ai.request.temperature", temperature),
            _attr("gen_ai.request.top_p", top_p),
            _attr("gen_ai.response.model", response_model),
            _attr("gen_ai.response.finish_reasons", (finish,) if finish else None),
            _attr("fleetgate.fallback.reason", fallback),
            _attr("fleetgate.affinity", affinity),
        )
    )


@lru_cache(maxsize=256)
def _deployment_block(
    endpoint: str,
    kind: str | None,
    model: str,
    stream: bool,
    base_url: str | None,
    deployment: str,
    provider_id: str,
    wire: str | None,
) -> tuple[bytes, bytes]:
    """An attempt's span on one deployment: its name and kind, and the attributes every
    such attempt shares, encoded once."""
    operation = operation_of(wire, endpoint)
    address, port = _server_of(base_url) if base_url else (None, None)
    return otlp.span_head(f"{operation} {model}", otlp.SPAN_CLIENT), b"".join(
        (
            _attr("gen_ai.operation.name", operation),
            _attr("gen_ai.provider.name", provider_name(kind)),
            _attr("gen_ai.request.model", model),
            _attr("gen_ai.request.stream", stream),
            _attr("server.address", address),
            _attr("server.port", port),
            _attr("fleetgate.deployment", deployment),
            _attr("fleetgate.provider", provider_id),
            _attr("fleetgate.wire", wire),
        )
    )


@lru_cache(maxsize=4096)
def _usage(input_tokens: int | None, output_tokens: int | None, cache_read: int | None) -> bytes:
    """An attempt's token counts (the pairs repeat: short prompts, capped answers)."""
    return (
        _attr("gen_ai.usage.input_tokens", input_tokens)
        + _attr("gen_ai.usage.output_tokens", output_tokens)
        + _attr("gen_ai.usage.cache_read.input_tokens", cache_read)
    )


@lru_cache(maxsize=4096)
def _context_counts(estimate: int | None, tokens: int | None) -> bytes:
    """The routing span's counts: the estimate, and the count the plan used."""
    return _attr("fleetgate.context.estimate", estimate) + _attr("fleetgate.context.tokens", tokens)
