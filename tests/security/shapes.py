"""What the fuzz tests share: arbitrary JSON values, and what a clean error looks like in
each client protocol."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st

from fleetgate.ingress.routes import error_protocol

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=12,
)


def clean_error(path: str, body: Any) -> bool:
    """An error body in the shape of the protocol that `path` speaks."""
    protocol = error_protocol(path)
    if protocol == "ollama":
        return isinstance(body, dict) and isinstance(body.get("error"), str)
    if protocol == "anthropic":
        err = body.get("error") if isinstance(body, dict) else None
        return body.get("type") == "error" and isinstance(err, dict) and "message" in err
    err = body.get("error") if isinstance(body, dict) else None
    return isinstance(err, dict) and isinstance(err.get("message"), str) and "type" in err


def fuzzing(examples: int, *, shrink: bool = True) -> settings:
    """The fuzz tests' hypothesis settings: `examples` made ones after the explicit ones, no
    deadline (each one crosses real HTTP), no example database, every health check off."""
    phases = [Phase.explicit, Phase.generate, *([Phase.shrink] if shrink else [])]
    return settings(
        max_examples=examples,
        deadline=None,
        database=None,
        phases=phases,
        suppress_health_check=list(HealthCheck),
    )
