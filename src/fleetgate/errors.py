"""Every error a client can get from fleetgate: a stable code, an HTTP status, a message.

The catalogue below is the single source of truth; `docs/errors.md` documents each entry
and a test keeps the two in step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson


@dataclass(frozen=True, slots=True)
class ErrorKind:
    code: str
    status: int
    type: str
    hint: str  # what the caller should do; documented in docs/errors.md


def _kinds(*kinds: ErrorKind) -> dict[str, ErrorKind]:
    return {k.code: k for k in kinds}


ERROR_KINDS: dict[str, ErrorKind] = _kinds(
    ErrorKind(
        "invalid_json", 400, "invalid_request_error", "Send a body that is one valid JSON object."
    ),
    ErrorKind(
        "invalid_request",
        400,
        "invalid_request_error",
        "Fix the field named in `param` and send the request again.",
    ),
    ErrorKind(
        "not_found",
        404,
        "invalid_request_error",
        "Check the path; `GET /v1/models` and the README list the endpoints.",
    ),
    ErrorKind(
        "method_not_allowed",
        405,
        "invalid_request_error",
        "Use the HTTP method the endpoint documents.",
    ),
    ErrorKind(
        "payload_too_large",
        413,
        "invalid_request_error",
        "Send a smaller body, or raise `server.max_body_bytes`.",
    ),
    ErrorKind(
        "model_not_found", 404, "invalid_request_error", "Use a model id from `GET /v1/models`."
    ),
    ErrorKind(
        "tier_not_found",
        400,
        "invalid_request_error",
        "The X-Fleetgate-Tier header names no configured tier; use one the message "
        "lists, or drop the header.",
    ),
    ErrorKind(
        "virtual_model_unavailable",
        503,
        "service_unavailable_error",
        "The virtual model's route chain is empty now (the message says why); retry "
        "later, or enable `continue_on_default` to fall back to the default tier.",
    ),
    ErrorKind(
        "no_route",
        503,
        "service_unavailable_error",
        "No deployment can serve this request now; the message says which filter "
        "removed the last candidate. Retry later or change the request.",
    ),
    ErrorKind(
        "unsupported_parameters",
        400,
        "invalid_request_error",
        "No eligible deployment supports a parameter or input the request uses "
        "(the message names it); drop it, or pick a model whose deployments support it.",
    ),
    ErrorKind(
        "no_allowed_provider",
        400,
        "invalid_request_error",
        "The provider preferences in force (request `provider`, model config, "
        "FLEETGATE_PROVIDER_* env) exclude every deployment; relax them.",
    ),
    ErrorKind(
        "upstream_error",
        502,
        "upstream_error",
        "Every candidate failed; the message carries the last upstream error. Retry later.",
    ),
    ErrorKind(
        "upstream_rejected",
        400,
        "invalid_request_error",
        "The backend refused the request as invalid (the status is the backend's "
        "own 4xx); fix the request as the message says.",
    ),
    ErrorKind(
        "upstream_timeout",
        504,
        "upstream_error",
        "Every candidate timed out. Retry later or raise the provider's timeouts.",
    ),
    ErrorKind(
        "upstream_unreachable",
        502,
        "upstream_error",
        "No candidate could be connected to. Check that the backends are up.",
    ),
    ErrorKind(
        "picker_unavailable",
        503,
        "service_unavailable_error",
        "Behind Envoy: the endpoint picker did not answer in time or could not be reached, "
        "so no model server was asked. Retry shortly; operators check the picker's pods.",
    ),
    ErrorKind(
        "upstream_overloaded",
        529,
        "overloaded_error",
        "Every candidate answered 529 (overloaded); retry later, after `Retry-After` "
        "seconds when it is set.",
    ),
    ErrorKind(
        "store_unavailable",
        503,
        "service_unavailable_error",
        "The admin API cannot reach the store (database); retry shortly. Proxied requests "
        "keep working meanwhile.",
    ),
    ErrorKind(
        "all_routes_rate_limited",
        429,
        "rate_limit_error",
        "Every eligible backend is rate limited; retry after `Retry-After` seconds.",
    ),
    ErrorKind(
        "gateway_queue_full",
        429,
        "rate_limit_error",
        "Every eligible worker is at its concurrency limit and its queue is full; "
        "retry after `Retry-After` seconds.",
    ),
    ErrorKind(
        "stream_interrupted",
        502,
        "upstream_error",
        "The upstream stream broke after output had started; retry the request.",
    ),
    ErrorKind(
        "context_too_large",
        400,
        "invalid_request_error",
        "The request needs more context than any deployment offers; shorten the "
        "input or lower the output budget.",
    ),
    ErrorKind(
        "unsupported_endpoint",
        400,
        "invalid_request_error",
        "The chosen model's deployments do not serve this endpoint; pick another model.",
    ),
    ErrorKind(
        "invalid_api_key",
        401,
        "authentication_error",
        "Send a client key made through the admin API as `Authorization: Bearer "
        "<key>` or `x-api-key: <key>`.",
    ),
    ErrorKind(
        "model_not_allowed",
        403,
        "permission_error",
        "This client key may not use the model; use one it allows, or ask an operator "
        "to widen its `allowed_models`.",
    ),
    ErrorKind(
        "rate_limited",
        429,
        "rate_limit_error",
        "This client key is over its requests- or tokens-per-minute limit; retry after "
        "`Retry-After` seconds.",
    ),
    ErrorKind(
        "budget_exceeded",
        429,
        "rate_limit_error",
        "This client key has spent its budget; ask an operator to raise it.",
    ),
    ErrorKind(
        "invalid_admin_key",
        401,
        "authentication_error",
        "Send the admin key (FLEETGATE_ADMIN_KEY or `admin.key`) as "
        "`Authorization: Bearer <key>` or `x-api-key: <key>`.",
    ),
    ErrorKind(
        "invalid_metrics_key",
        401,
        "authentication_error",
        "Send the metrics key (`server.metrics_key`) or the admin key as "
        "`Authorization: Bearer <key>`.",
    ),
    ErrorKind(
        "admin_disabled",
        403,
        "permission_error",
        "The admin API is off because no admin key is set; set FLEETGATE_ADMIN_KEY or "
        "`admin.key` and restart.",
    ),
    ErrorKind(
        "invalid_config",
        422,
        "invalid_request_error",
        "The change would make the fleet invalid and was not applied; fix what "
        "`problems` lists and send it again.",
    ),
    ErrorKind(
        "no_config_file",
        409,
        "invalid_request_error",
        "The gateway was started without a fleet file, so there is none to reload; change "
        "the fleet through the admin API instead.",
    ),
    ErrorKind(
        "already_exists",
        409,
        "invalid_request_error",
        "An entity with this id exists; PATCH or PUT it, or pick another id.",
    ),
    ErrorKind(
        "in_use",
        409,
        "invalid_request_error",
        "Other entities still use this one (`users` lists them); change or delete them first.",
    ),
    ErrorKind(
        "request_timeout",
        408,
        "invalid_request_error",
        "The request's headers or body arrived too slowly; send the whole request at once "
        "(or raise `server.header_timeout_seconds` / `server.body_timeout_seconds`).",
    ),
    ErrorKind(
        "server_busy",
        503,
        "service_unavailable_error",
        "The gateway process is at its cap of open connections (`server.max_connections`); "
        "retry after `Retry-After` seconds, or reuse a kept-alive connection.",
    ),
    ErrorKind(
        "internal_error",
        500,
        "internal_error",
        "A bug in fleetgate; report it with the X-Request-Id header.",
    ),
)


class GatewayError(Exception):
    """An error answered to the client in its protocol's error shape."""

    def __init__(
        self,
        code: str,
        message: str,
        *,
        param: str | None = None,
        status: int | None = None,
        headers: dict[str, str] | None = None,
        upstream_body: bytes | None = None,
    ) -> None:
        super().__init__(message)
        kind = ERROR_KINDS[code]
        self.code = code
        self.message = message
        self.param = param
        self.status = status if status is not None else kind.status
        self.type = kind.type
        self.headers = headers or {}
        self.upstream_body = upstream_body

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "code": self.code,
                "param": self.param,
            }
        }

    def to_json(self) -> bytes:
        return orjson.dumps(self.body())


def invalid(message: str, param: str | None = None) -> GatewayError:
    return GatewayError("invalid_request", message, param=param)


def retry_after_header(seconds: float | None) -> dict[str, str]:
    """`Retry-After` in whole seconds (at least 1); none when there is nothing to say."""
    if seconds is None:
        return {}
    return {"Retry-After": str(max(1, math.ceil(seconds)))}
