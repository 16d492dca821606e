"""Envoy bootstraps as a gateway implementation writes them, made from `fleetgate
envoy-config`'s output: what the tests edit to put the picker behind another data plane's
shape."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fleetgate.epp.envoy_config import OBSERVE_FILTER, PICK_FILTER


def http_filters(doc: Any) -> list[dict[str, Any]]:
    """The listener's HTTP filter list, wherever the bootstrap nests it."""
    if isinstance(doc, dict):
        if "http_filters" in doc:
            return doc["http_filters"]
        values = list(doc.values())
    elif isinstance(doc, list):
        values = doc
    else:
        values = []
    for value in values:
        found = http_filters(value)
        if found:
            return found
    return []


def without_observer(doc: dict[str, Any]) -> None:
    """The bootstrap with no observe filter: the picker is never shown an answer."""
    filters = http_filters(doc)
    filters[:] = [f for f in filters if f["name"] != OBSERVE_FILTER]


def gateway_filter(
    response_body_mode: str,
    response_header_mode: str = "SEND",
    request_body_mode: str = "FULL_DUPLEX_STREAMED",
) -> Callable[[dict[str, Any]], None]:
    """The bootstrap as a gateway would write it: the pick's filter alone, the response
    sent to it, none of fleetgate's own settings (the call's role, the headers shown)."""

    def edit(doc: dict[str, Any]) -> None:
        without_observer(doc)
        (pick,) = [f for f in http_filters(doc) if f["name"] == PICK_FILTER]
        config = pick["typed_config"]
        config.pop("forward_rules", None)
        config["grpc_service"].pop("initial_metadata", None)
        config["processing_mode"] = {
            "request_header_mode": "SEND",
            "response_header_mode": response_header_mode,
            "request_body_mode": request_body_mode,
            "response_body_mode": response_body_mode,
            "request_trailer_mode": "SEND"
            if request_body_mode == "FULL_DUPLEX_STREAMED"
            else "SKIP",
            "response_trailer_mode": "SEND" if response_body_mode != "NONE" else "SKIP",
        }

    return edit
