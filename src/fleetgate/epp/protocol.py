"""The names the endpoint picker protocol (Gateway API Inference Extension) and fleetgate's
Envoy bootstrap agree on."""

from __future__ import annotations

DESTINATION = "x-gateway-destination-endpoint"  # header and `envoy.lb` metadata key
SERVED = "x-gateway-destination-endpoint-served"  # the endpoint that served, when reported
SUBSET = "x-gateway-destination-endpoint-subset"  # the proxy's candidate endpoints
LB_NAMESPACE = "envoy.lb"  # the dynamic metadata namespace the load balancer reads
SUBSET_NAMESPACE = "envoy.lb.subset_hint"  # where a proxy puts its subset hint
# fleetgate's own dynamic metadata: the pick's claim token, from the pick filter (which
# receives it) to the observe filter (which forwards it), when another request in flight
# has the same id (a client's own id, shared by its requests)
PICK_NAMESPACE = "fleetgate.pick"
PICK_TOKEN = "token"

# the gRPC metadata the bootstrap gives each ext_proc filter's calls: which of the two it is
ROLE_HEADER = "x-fleetgate-role"
ROLE_PICK = "pick"  # the request path: headers and body in, the pick out
ROLE_OBSERVE = "observe"  # the response path, in Envoy's observability mode: nothing waits

# The body modes the bootstrap's pick filter can run, the default first. STREAMED sends the
# body as it comes, without waiting for the headers' answer, each message under the message
# timeout: the pick takes one exchange, as in FULL_DUPLEX_STREAMED (where Envoy applies no
# message timeout at all), and a stalled picker still fails closed, as in BUFFERED (which
# costs a second exchange: the headers' answer before the body is sent). docs/kubernetes.md,
# "Body modes".
BODY_MODES = ("STREAMED", "BUFFERED", "FULL_DUPLEX_STREAMED")

EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"
# the Envoy attribute that says which upstream host served (sent with the response headers)
UPSTREAM_ADDRESS = "upstream.address"
REQUEST_ID = "request.id"  # the attribute that carries the request's `x-request-id`

# the response headers the answer's evidence reads (the observe filter is shown no others)
WATCHED_RESPONSE_HEADERS = (":status", "content-type", "retry-after", SERVED)
