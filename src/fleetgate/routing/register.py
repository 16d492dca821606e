"""The routing pipeline's filters and orderers, in the order they run."""

from __future__ import annotations

from fleetgate.routing.filters.availability import AvailabilityFilter
from fleetgate.routing.filters.context_fit import ContextFitFilter
from fleetgate.routing.filters.endpoint_support import EndpointSupportFilter
from fleetgate.routing.filters.num_ctx import NumCtxFilter
from fleetgate.routing.orderers.best_fit import BestFitOrderer
from fleetgate.routing.orderers.loaded_model import LoadedModelOrderer
from fleetgate.routing.orderers.priority import PriorityOrderer
from fleetgate.routing.plan import CandidateFilter, CandidateOrderer

FILTERS: list[CandidateFilter] = [
    EndpointSupportFilter(),
    AvailabilityFilter(),
    NumCtxFilter(),  # before context fit: the window of a num_ctx request is num_ctx
    ContextFitFilter(),
]

ORDERERS: list[CandidateOrderer] = [
    PriorityOrderer(),
    LoadedModelOrderer(),
    BestFitOrderer(),  # last: a stable sort, so best fit ranks first and ties keep order
]
