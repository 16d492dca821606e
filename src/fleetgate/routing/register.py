"""The routing pipeline's filters and orderers, in the order they run."""

from __future__ import annotations

from fleetgate.routing.filters.availability import AvailabilityFilter
from fleetgate.routing.filters.endpoint_support import EndpointSupportFilter
from fleetgate.routing.orderers.priority import PriorityOrderer
from fleetgate.routing.plan import CandidateFilter, CandidateOrderer

FILTERS: list[CandidateFilter] = [
    EndpointSupportFilter(),
    AvailabilityFilter(),
]

ORDERERS: list[CandidateOrderer] = [
    PriorityOrderer(),
]
