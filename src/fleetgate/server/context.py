"""What the gateway's own endpoints share: the pipeline, the body limit, and who may see
what (the admin key, the client keys)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fleetgate.auth.guard import presents
from fleetgate.auth.keys import ClientKey
from fleetgate.control.plane import ControlPlane
from fleetgate.errors import GatewayError
from fleetgate.pipeline.core import Pipeline
from fleetgate.web.asgi import Scope


@dataclass(slots=True)
class EndpointContext:
    pipeline: Pipeline
    control: ControlPlane | None
    max_body: int

    def is_admin(self, scope: Scope) -> bool:
        return self.control is not None and presents(scope["headers"], self.control.admin_key)

    def require_admin(self, scope: Scope) -> None:
        if self.control is None or not self.control.admin_key:
            raise GatewayError(
                "admin_disabled",
                "This endpoint needs the admin key, and none is set. Set FLEETGATE_ADMIN_KEY "
                "(or `admin.key` in the fleet file) and restart.",
            )
        if not self.is_admin(scope):
            raise GatewayError("invalid_admin_key", "This endpoint needs the admin key.")

    def identify(self, scope: Scope, model: str | None = None) -> ClientKey | None:
        """With auth on, the caller's key (401 without one; 403 for a model it may not
        use); None with auth off."""
        guard = self.pipeline.guard
        return guard.identify(scope["headers"], model) if guard is not None else None

    def listed(self, scope: Scope) -> Callable[[str], bool]:
        """Which models a catalog shows the caller: with auth on, a key (401 without one)
        sees the models it may use, nothing more."""
        key = self.identify(scope)
        if key is None or key.allowed_models is None:
            return lambda _model: True
        return key.allows
