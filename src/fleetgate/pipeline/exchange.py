"""One request's facts that every stage and front shares: its id, start time, client key,
budget hold, the protocol its errors are answered in, its `X-Fleetgate-*` headers, and the
client's trace context."""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

from fleetgate.auth.budgets import Hold
from fleetgate.auth.keys import ClientKey
from fleetgate.errors import GatewayError, invalid
from fleetgate.ingress.routes import error_protocol
from fleetgate.web.asgi import Headers, new_request_id

_REQUEST_ID_OK = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
MAX_HEADER_VALUE = 256  # an X-Fleetgate-* header names a tier or a conversation: short
# the headers read by name (besides the `x-fleetgate-` ones), each to its branch
_REQUEST_ID, _ANTHROPIC_VERSION, _ANTHROPIC_BETA, _TRACEPARENT, _TRACESTATE = range(5)
_READ = {
    b"x-request-id": _REQUEST_ID,
    b"anthropic-version": _ANTHROPIC_VERSION,
    b"anthropic-beta": _ANTHROPIC_BETA,
    b"traceparent": _TRACEPARENT,
    b"tracestate": _TRACESTATE,
}
FLEETGATE_PREFIX = "x-fleetgate-"  # the request's own X-Fleetgate-* headers
# every request header an Exchange reads: a data plane that shows the picker only some of a
# request's headers shows it these (and the prefix's)
READ_HEADERS = tuple(name.decode() for name in _READ)
_PREFIX = FLEETGATE_PREFIX.encode()


class Exchange:
    """Per-request facts, read once from the request's path and headers (lower-cased names,
    raw bytes: as ASGI and gRPC metadata both give them)."""

    __slots__ = (
        "client_key",
        "headers",
        "hold",
        "id_given",
        "passed",
        "path",
        "protocol",
        "refused",
        "request_id",
        "started",
        "traceparent",
        "tracestate",
    )

    def __init__(self, path: str, headers: Iterable[tuple[bytes, bytes]]) -> None:
        self.started = time.perf_counter()
        self.client_key: ClientKey | None = None
        self.hold: Hold | None = None  # the request's expected cost, held against a budget
        self.headers: dict[str, str] = {}
        self.passed: dict[str, str] = {}  # the profile's `passed_headers`
        self.refused: GatewayError | None = None  # a header no request may carry
        self.path = path
        self.traceparent: str | None = None  # the client's trace (W3C trace context)
        self.tracestate: str | None = None
        request_id = None
        anthropic_client = False
        beta: str | None = None
        for name, value in headers:
            which = _READ.get(name)
            if which is None:  # most headers: one lookup, and a prefix test
                if name.startswith(_PREFIX):
                    if len(value) > MAX_HEADER_VALUE:
                        header = name.decode("latin-1")
                        self.refused = invalid(
                            f"`{header}` is longer than {MAX_HEADER_VALUE} characters.", header
                        )
                    self.headers[name.decode("latin-1")] = value.decode("latin-1")
            elif which == _REQUEST_ID:
                request_id = value.decode("latin-1")
                if not _REQUEST_ID_OK.match(request_id):
                    request_id = None  # outside the rule (and the log's column): ours instead
            elif which == _ANTHROPIC_VERSION:
                anthropic_client = True
            elif not value:
                continue
            elif which == _ANTHROPIC_BETA:
                # several lines are one list, as Anthropic reads them (comma-separated)
                more = value.decode("latin-1")
                beta = f"{beta},{more}" if beta else more
            elif which == _TRACEPARENT:
                self.traceparent = value.decode("latin-1")
            else:  # tracestate: several lines are one list, as for beta
                more = value.decode("latin-1")
                self.tracestate = f"{self.tracestate},{more}" if self.tracestate else more
        # the shape errors are answered in
        self.protocol = error_protocol(path, anthropic_client)
        if beta is not None and self.protocol == "anthropic":
            self.passed["anthropic-beta"] = beta
        # the client's own id, taken as it is (a front that passes the request on need
        # not set it again)
        self.id_given = request_id is not None
        self.request_id = request_id or new_request_id()

    def base_headers(self) -> Headers:
        return [(b"x-request-id", self.request_id.encode())]
