"""The fleet model, the ground floor every stage reads: `model.py` (providers,
deployments, models), `routes.py` (virtual models and tiers as route tables),
`snapshot.py` (the immutable fleet and its holder), `families.py` (the tokenizer family a
model name suggests). It imports `config/` and nothing above it."""

from fleetgate.fleet.model import (
    Deployment,
    Model,
    Provider,
    provider_secrets,
    redactor_for,
    resolve_secret,
)
from fleetgate.fleet.snapshot import Fleet, FleetHolder, build_fleet

__all__ = [
    "Deployment",
    "Fleet",
    "FleetHolder",
    "Model",
    "Provider",
    "build_fleet",
    "provider_secrets",
    "redactor_for",
    "resolve_secret",
]
