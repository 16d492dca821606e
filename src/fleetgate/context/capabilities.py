"""The estimator settings a fleet uses: `routing.context`, with the estimation fields of a
`model_capabilities.context` block layered on top when the config sets them."""

from __future__ import annotations

from fleetgate.config.schema import ContextConfig, FleetConfig
from fleetgate.fleet import Fleet

# model_capabilities.context field -> routing.context field
_ALIASES = {
    "estimation_margin_percent": "margin_percent",
    "vision_reserve_tokens_per_image": "image_tokens",
}


def _merged(config: FleetConfig) -> ContextConfig:
    settings = config.routing.context
    if "model_capabilities" not in config.model_fields_set:
        return settings
    caps = config.model_capabilities.context
    update = {
        target: getattr(caps, name)
        for name, target in _ALIASES.items()
        if name in caps.model_fields_set
    }
    return settings.model_copy(update=update) if update else settings


def context_settings(fleet: Fleet) -> ContextConfig:
    """Computed once per fleet snapshot."""
    settings = fleet.extra.get("context_settings")
    if settings is None:
        settings = fleet.extra["context_settings"] = _merged(fleet.config)
    return settings
