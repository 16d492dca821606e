"""`fleetgate envoy-config`: a static Envoy bootstrap that routes the fleet through the picker.

The choices, and why, are in docs/kubernetes.md. In short:
- two ext_proc filters on the same picker: `pick` reads the request (headers and body) and
  answers the endpoints; `observe` runs in observability mode, so Envoy sends it the
  response without ever waiting for it (a stream keeps its cadence);
- the endpoints' cluster uses the override-host load balancing policy: it takes the
  picked `ip:port` list from `envoy.lb` metadata (or the header) and each retry goes to
  the next endpoint of that list;
- a dead or slow picker fails the request closed (`failure_mode_allow: false`, 503), never
  open: an endpoint Envoy chose blind may not serve the model at all.
"""

from __future__ import annotations

from typing import Any

import yaml

from fleetgate.auth.guard import CREDENTIAL_HEADERS
from fleetgate.config.addresses import endpoint_text, host_port
from fleetgate.config.schema import FleetConfig
from fleetgate.epp.local_replies import local_reply_config
from fleetgate.epp.protocol import (
    BODY_MODES,
    DESTINATION,
    LB_NAMESPACE,
    PICK_NAMESPACE,
    REQUEST_ID,
    ROLE_HEADER,
    ROLE_OBSERVE,
    ROLE_PICK,
    SUBSET_NAMESPACE,
    UPSTREAM_ADDRESS,
    WATCHED_RESPONSE_HEADERS,
)
from fleetgate.fleet import build_fleet
from fleetgate.fleet.data_plane import provider_blocker
from fleetgate.ingress.routes import INGRESS_ROUTES
from fleetgate.pipeline.exchange import FLEETGATE_PREFIX, READ_HEADERS

EXT_PROC = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
EXT_PROC_ROUTE = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExtProcPerRoute"
HCM = (
    "type.googleapis.com/"
    "envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
)
PICK_FILTER = "envoy.filters.http.ext_proc"
OBSERVE_FILTER = "fleetgate.observe"
ENDPOINTS_CLUSTER = "fleetgate_endpoints"
PICKER_CLUSTER = "fleetgate_epp"
HTTP_CLUSTER = "fleetgate_http"
# beyond the exact count's own budget (routing.context.refine.timeout_seconds): the plan,
# the body's parse, and the gRPC exchange
MESSAGE_MARGIN = 0.5


def _seconds(value: float) -> str:
    return f"{value:.3f}s"


def _address(host: str, port: int) -> dict[str, Any]:
    return {"socket_address": {"address": host, "port_value": port}}


def fleet_endpoints(config: FleetConfig) -> list[tuple[str, int]]:
    """Every `host:port` the data plane may be sent to, once each, in the fleet's order."""
    fleet = build_fleet(config)
    seen: dict[tuple[str, int], None] = {}
    for provider in fleet.providers.values():
        if provider_blocker(provider) is not None:
            continue
        where = host_port(provider.base_url)
        if where is not None:
            seen.setdefault(where, None)
    return list(seen)


def _split(address: str, what: str) -> tuple[str, int]:
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise ValueError(f"{what} must be HOST:PORT, got {address!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _ext_proc(picker_timeout: float, role: str) -> dict[str, Any]:
    return {
        "grpc_service": {
            "envoy_grpc": {"cluster_name": PICKER_CLUSTER},
            "initial_metadata": [{"key": ROLE_HEADER, "value": role}],
            "timeout": _seconds(picker_timeout),
        }
    }


def _forwarded(exact: tuple[str, ...], prefix: str | None = None) -> dict[str, Any]:
    """ext_proc's `forward_rules`: the only headers Envoy shows the picker. Each header
    shown is decoded and looked at on every request; those it never reads stay in Envoy."""
    patterns: list[dict[str, str]] = [{"exact": name} for name in exact]
    if prefix is not None:
        patterns.append({"prefix": prefix})
    return {"allowed_headers": {"patterns": patterns}}


# what the pick reads of a request's headers: its path, what an Exchange reads, a key
PICK_HEADERS = (":path", *READ_HEADERS, *CREDENTIAL_HEADERS)


def _streamed(timeout: float, config: FleetConfig) -> dict[str, Any]:
    """What the STREAMED body mode adds: the body goes to the picker as it comes, without
    waiting for the headers' answer, which the picker gives with the pick. While a body
    comes in parts, the picker asks Envoy after each one to wait for the next as long as
    the proxy waits for a body (`override_message_timeout`, bounded here): a slow client
    is not taken for a stalled picker, whose silence still ends the request at `timeout`."""
    return {
        "send_body_without_waiting_for_header_response": True,
        "max_message_timeout": _seconds(max(timeout, config.server.body_timeout_seconds)),
    }


def _pick_filter(config: FleetConfig, body_mode: str) -> dict[str, Any]:
    timeout = config.routing.context.refine.timeout_seconds + MESSAGE_MARGIN
    processor = _ext_proc(timeout, ROLE_PICK)
    processor.update(
        {
            "@type": EXT_PROC,
            # fail closed: see the module's docstring and docs/kubernetes.md
            "failure_mode_allow": False,
            "status_on_error": {"code": 503},
            "message_timeout": _seconds(timeout),
            "processing_mode": {
                "request_header_mode": "SEND",
                "request_body_mode": body_mode,
                # a full-duplex body ends with its trailers, when it has any
                "request_trailer_mode": "SEND" if body_mode == "FULL_DUPLEX_STREAMED" else "SKIP",
                "response_header_mode": "SKIP",
                "response_body_mode": "NONE",
                "response_trailer_mode": "SKIP",
            },
            "forward_rules": _forwarded(PICK_HEADERS, FLEETGATE_PREFIX),
            **(_streamed(timeout, config) if body_mode == "STREAMED" else {}),
            # the pick sets `x-envoy-max-retries` and `x-envoy-upstream-rq-timeout-ms`
            "mutation_rules": {"allow_all_routing": True, "allow_envoy": True},
            "metadata_options": {
                # the endpoints, and the claim token of a pick whose id another shares
                "receiving_namespaces": {"untyped": [LB_NAMESPACE, PICK_NAMESPACE]},
                # a data plane's subset hint, when an earlier filter sets one
                "forwarding_namespaces": {"untyped": [SUBSET_NAMESPACE]},
            },
        }
    )
    return {"name": PICK_FILTER, "typed_config": processor}


def _observe_filter() -> dict[str, Any]:
    processor = _ext_proc(1.0, ROLE_OBSERVE)
    processor.update(
        {
            "@type": EXT_PROC,
            # Envoy sends and never waits: the answer reaches the client as it comes
            "observability_mode": True,
            "failure_mode_allow": True,  # evidence lost never stops an answer
            "processing_mode": {
                # which pick an answer belongs to comes as an attribute with the response
                # headers (the request id the pick set): no message for the request
                "request_header_mode": "SKIP",
                "request_body_mode": "NONE",
                "request_trailer_mode": "SKIP",
                "response_header_mode": "SEND",
                "response_body_mode": "STREAMED",
                "response_trailer_mode": "SKIP",
            },
            "response_attributes": [UPSTREAM_ADDRESS, REQUEST_ID],
            # the pick's claim token, when it set one (requests that share the client's id)
            "metadata_options": {"forwarding_namespaces": {"untyped": [PICK_NAMESPACE]}},
            "forward_rules": _forwarded(WATCHED_RESPONSE_HEADERS),
        }
    )
    return {"name": OBSERVE_FILTER, "typed_config": processor}


def _routes(config: FleetConfig, endpoints: int) -> list[dict[str, Any]]:
    fleet = build_fleet(config)
    providers = [p for p in fleet.providers.values() if provider_blocker(p) is None]
    first_byte = max((p.timeouts.first_byte for p in providers), default=120.0)
    routes: list[dict[str, Any]] = []
    for path in INGRESS_ROUTES:
        routes.append(
            {
                "match": {"path": path},
                "route": {
                    "cluster": ENDPOINTS_CLUSTER,
                    # a stream lasts as long as it lasts: the whole-answer bound is the
                    # picked provider's (`x-envoy-upstream-rq-timeout-ms`, from the pick)
                    "timeout": "0s",
                    "idle_timeout": _seconds(first_byte),
                    "retry_policy": {
                        # refused connections, resets, 5xx and 429: before the first byte
                        # only (Envoy never retries once the answer has begun)
                        "retry_on": "5xx,reset,connect-failure,retriable-status-codes",
                        "retriable_status_codes": [429],
                        "num_retries": max(1, endpoints - 1),
                        "retry_back_off": {"base_interval": "0.005s", "max_interval": "0.05s"},
                    },
                },
                # a retry sends the body again: Envoy keeps it up to this size
                "request_body_buffer_limit": config.server.max_body_bytes,
            }
        )
    # everything else (the catalog, explain, count_tokens, …) is the picker's HTTP side
    routes.append(
        {
            "match": {"prefix": "/"},
            "route": {"cluster": HTTP_CLUSTER, "timeout": "60s"},
            "typed_per_filter_config": {
                name: {"@type": EXT_PROC_ROUTE, "disabled": True}
                for name in (PICK_FILTER, OBSERVE_FILTER)
            },
        }
    )
    return routes


def _cluster(name: str, kind: str, hosts: list[tuple[str, int]], **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "type": kind,
        "connect_timeout": "1s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {"lb_endpoints": [{"endpoint": {"address": _address(h, p)}} for h, p in hosts]}
            ],
        },
        **extra,
    }


def envoy_bootstrap(
    config: FleetConfig,
    epp: str,
    listen: str,
    http: str | None = None,
    admin: str = "127.0.0.1:9901",
    body_mode: str = BODY_MODES[0],
) -> dict[str, Any]:
    """The bootstrap as data: `epp` the picker's gRPC address, `listen` Envoy's own, `http`
    the picker's HTTP side (default: the picker's host, port 8080)."""
    if body_mode not in BODY_MODES:
        raise ValueError(f"the body mode is one of {', '.join(BODY_MODES)}")
    epp_host, epp_port = _split(epp, "--epp")
    listen_host, listen_port = _split(listen, "--listen")
    http_host, http_port = _split(http, "--http") if http else (epp_host, 8080)
    admin_host, admin_port = _split(admin, "--admin")
    endpoints = fleet_endpoints(config)
    fleet = build_fleet(config)
    handed = [p for p in fleet.providers.values() if provider_blocker(p) is None]
    connect = max((p.timeouts.connect for p in handed), default=5.0)
    most = max((len(m.deployments) for m in fleet.models.values()), default=1)
    h2 = {
        "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
            "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
            "explicit_http_config": {"http2_protocol_options": {}},
        }
    }
    override_host = {
        "policies": [
            {
                "typed_extension_config": {
                    "name": "envoy.load_balancing_policies.override_host",
                    "typed_config": {
                        "@type": "type.googleapis.com/envoy.extensions.load_balancing_policies"
                        ".override_host.v3.OverrideHost",
                        "override_host_sources": [
                            {"metadata": {"key": LB_NAMESPACE, "path": [{"key": DESTINATION}]}},
                            {"header": DESTINATION},
                        ],
                        "fallback_policy": {
                            "policies": [
                                {
                                    "typed_extension_config": {
                                        "name": "envoy.load_balancing_policies.round_robin",
                                        "typed_config": {
                                            "@type": "type.googleapis.com/envoy.extensions."
                                            "load_balancing_policies.round_robin.v3.RoundRobin"
                                        },
                                    }
                                }
                            ]
                        },
                    },
                }
            }
        ]
    }
    endpoints_cluster = _cluster(
        ENDPOINTS_CLUSTER,
        # a name (a headless Service) resolves to every replica; an IP is itself
        "STRICT_DNS",
        endpoints,
        load_balancing_policy=override_host,
    )
    endpoints_cluster["connect_timeout"] = _seconds(connect)
    hcm = {
        "@type": HCM,
        "stat_prefix": "fleetgate",
        "codec_type": "AUTO",
        # the client gets the request id the picker set, as the proxy's clients do
        "always_set_request_id_in_response": True,
        # Envoy's own answers (no picker, no endpoint reachable, a timeout) in the
        # client's protocol, with the proxy's codes
        "local_reply_config": local_reply_config(),
        "route_config": {
            "name": "fleetgate",
            "virtual_hosts": [{"name": "fleet", "domains": ["*"], "routes": _routes(config, most)}],
        },
        "http_filters": [
            _pick_filter(config, body_mode),
            _observe_filter(),
            {
                "name": "envoy.filters.http.router",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                },
            },
        ],
    }
    return {
        "admin": {"address": _address(admin_host, admin_port)},
        "static_resources": {
            "listeners": [
                {
                    "name": "fleetgate_inference",
                    "address": _address(listen_host, listen_port),
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": hcm,
                                }
                            ]
                        }
                    ],
                }
            ],
            "clusters": [
                endpoints_cluster,
                _cluster(
                    PICKER_CLUSTER,
                    "STRICT_DNS",
                    [(epp_host, epp_port)],
                    typed_extension_protocol_options=h2,
                ),
                _cluster(HTTP_CLUSTER, "STRICT_DNS", [(http_host, http_port)]),
            ],
        },
    }


def envoy_config_text(config: FleetConfig, epp: str, listen: str, **options: Any) -> str:
    return yaml.safe_dump(envoy_bootstrap(config, epp, listen, **options), sort_keys=False)


__all__ = ["endpoint_text", "envoy_bootstrap", "envoy_config_text", "fleet_endpoints"]
