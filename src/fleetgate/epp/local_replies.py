"""Envoy's own answers, in the client's protocol with fleetgate's codes (the HTTP connection
manager's `local_reply_config`).

Behind the picker, some errors are Envoy's, not fleetgate's: the picker did not answer, no
endpoint it named could be reached, an endpoint timed out. Envoy answers those itself, in
plain text (or with no body at all). Each is mapped here to the code, status and body shape
the proxy gives the same failure, built by the proxy's own error shaping
(`pipeline/error_shapes.py`), with Envoy's reason in the message.

A mapper matches only Envoy's own answers of one kind: by the response flags Envoy sets on
an upstream failure, or by the details it gives a failed external processor or an
oversized body. The picker's refusals (ImmediateResponses, details `fleetgate_refused`) and
every upstream's own answer pass unchanged.
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

import orjson

from fleetgate.errors import GatewayError
from fleetgate.ingress.routes import INGRESS_ROUTES, error_protocol
from fleetgate.pipeline.error_shapes import error_body, error_status

CEL_FILTER = "envoy.access_loggers.extension_filters.cel"
CEL_EXPRESSION = (
    "type.googleapis.com/envoy.extensions.access_loggers.filters.cel.v3.ExpressionFilter"
)


def _protocol_paths() -> list[tuple[str, str]]:
    """Each protocol other than OpenAI's, with a regex of the picked paths whose clients
    expect it (`error_protocol` says which; a query string may follow the path)."""
    by_protocol: dict[str, list[str]] = {}
    for path in INGRESS_ROUTES:
        protocol = error_protocol(path)
        if protocol != "openai":
            by_protocol.setdefault(protocol, []).append(re.escape(path))
    return [(protocol, f"^({'|'.join(paths)})(\\?.*)?$") for protocol, paths in by_protocol.items()]


class EnvoyReply(NamedTuple):
    code: str
    filter: dict[str, Any]  # an access-log filter that matches only this kind of answer
    message: str  # Envoy's own reason goes where its command operator stands


def _cel(expression: str) -> dict[str, Any]:
    return {
        "extension_filter": {
            "name": CEL_FILTER,
            "typed_config": {"@type": CEL_EXPRESSION, "expression": expression},
        }
    }


def _flags(*flags: str) -> dict[str, Any]:
    return {"response_flag_filter": {"flags": list(flags)}}


# In order: Envoy takes the first mapper that matches. A connection refused on every
# endpoint sets both UF (connect failure) and URX (retries exhausted): unreachable first.
ENVOY_REPLIES = (
    EnvoyReply(
        "picker_unavailable",
        # a picker that refused the connection, reset the call or passed the message timeout
        _cel("response.code_details.startsWith('ext_proc_error')"),
        "The endpoint picker did not answer (%RESPONSE_CODE_DETAILS%), so the request was "
        "sent to no model server. Retry shortly.",
    ),
    EnvoyReply(
        "upstream_unreachable",
        _flags("UF", "UH"),
        "No model server the picker named could be connected to (%LOCAL_REPLY_BODY%). "
        "Retry later; check that the backends are up.",
    ),
    EnvoyReply(
        "upstream_timeout",
        _flags("UT"),
        "The model server did not answer within its provider's timeout "
        "(%LOCAL_REPLY_BODY%). Retry later, or raise the provider's timeouts.",
    ),
    EnvoyReply(
        "upstream_error",
        _flags("UC", "UR", "LR", "URX", "UO"),
        "The model server's connection broke before it answered (%LOCAL_REPLY_BODY%). "
        "Retry the request.",
    ),
    EnvoyReply(
        "payload_too_large",
        _cel("response.code_details == 'request_payload_too_large'"),
        "The request body is larger than the gateway takes (server.max_body_bytes). "
        "Send a smaller body.",
    ),
)


def _strings(value: Any) -> Any:
    """A JSON body as Envoy's `json_format` takes it: no nulls (a field left out)."""
    if isinstance(value, dict):
        return {k: _strings(v) for k, v in value.items() if v is not None}
    return value


def _mapper(reply: EnvoyReply, protocol: str, path: str | None) -> dict[str, Any]:
    error = GatewayError(reply.code, reply.message)
    body = _strings(orjson.loads(error_body(protocol, error)))
    match = reply.filter
    if path is not None:
        on_path = {
            "header_filter": {
                "header": {"name": ":path", "string_match": {"safe_regex": {"regex": path}}}
            }
        }
        match = {"and_filter": {"filters": [reply.filter, on_path]}}
    return {
        "filter": match,
        "status_code": error_status(protocol, error),
        "body_format_override": {"json_format": body},
    }


def local_reply_config() -> dict[str, Any]:
    """The `local_reply_config` of the HTTP connection manager in front of the picker."""
    mappers = []
    for reply in ENVOY_REPLIES:
        for protocol, path in _protocol_paths():
            mappers.append(_mapper(reply, protocol, path))
        mappers.append(_mapper(reply, "openai", None))
    return {"mappers": mappers}
