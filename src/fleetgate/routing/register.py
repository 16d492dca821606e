"""The routing pipeline's filters and orderers, in the order they run.

Precedence of the orderers (docs/routing.md): each sorts stably, so a later sort ranks
above an earlier one. Best fit (run last of the ranking orderers) decides first, then the
provider preferences' `order` / `sort`, then priority and the loaded-model bonus; least in
flight and config order break what is left. The tie-breakers after them (engine load,
affinity) only reorder runs that every ranking orderer left tied (routing/ties.py).
"""

from __future__ import annotations

from fleetgate.routing.filters.availability import AvailabilityFilter
from fleetgate.routing.filters.capability import CapabilityFilter
from fleetgate.routing.filters.context_fit import ContextFitFilter
from fleetgate.routing.filters.endpoint_support import EndpointSupportFilter
from fleetgate.routing.filters.num_ctx import NumCtxFilter
from fleetgate.routing.filters.provider_prefs import ProviderPreferenceFilter
from fleetgate.routing.orderers.affinity import AffinityOrderer
from fleetgate.routing.orderers.best_fit import BestFitOrderer
from fleetgate.routing.orderers.engine_load import EngineLoadOrderer
from fleetgate.routing.orderers.loaded_model import LoadedModelOrderer
from fleetgate.routing.orderers.preference import PreferenceOrderer
from fleetgate.routing.orderers.priority import PriorityOrderer
from fleetgate.routing.plan import CandidateFilter, CandidateOrderer

# Static filters (what may and can serve the request) run before availability, so the
# effective-pool count and the emptied-plan error do not depend on transient health.
FILTERS: list[CandidateFilter] = [
    EndpointSupportFilter(),
    ProviderPreferenceFilter(),
    CapabilityFilter(),
    AvailabilityFilter(),
    NumCtxFilter(),  # before context fit: the window of a num_ctx request is num_ctx
    ContextFitFilter(),
]

ORDERERS: list[CandidateOrderer] = [
    PriorityOrderer(),
    LoadedModelOrderer(),  # after priority: among equal priorities, warm workers first
    PreferenceOrderer(),  # after priority: `order` / `sort` override it, ties keep it
    BestFitOrderer(),  # a stable sort, so best fit ranks first and ties keep order
    # tie-breakers, inside runs of equal rank only:
    EngineLoadOrderer(),  # a busy engine (queue, KV cache) after its peers
    AffinityOrderer(),  # then the one holding the prompt's prefix, within a bounded load
]
