"""Admin API errors: the gateway's error shape plus structured details."""

from __future__ import annotations

from typing import Any

from fleetgate.errors import GatewayError


class AdminError(GatewayError):
    """A GatewayError that carries structured details (problems, users) in its body."""

    def __init__(self, code: str, message: str, **details: Any) -> None:
        super().__init__(code, message)
        self.details = details

    def body(self) -> dict[str, Any]:
        data = super().body()
        data["error"].update(self.details)
        return data
