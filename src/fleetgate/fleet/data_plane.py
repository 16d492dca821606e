"""Which deployments an endpoint picker can hand to a data plane (Envoy), and at what address.

A picker names an `ip:port`; the data plane connects there itself, in plain HTTP, and sends
the client's request as it came (its path, its headers, at most its `model` rewritten). A
deployment needs more than that when its provider holds credentials, adds headers, speaks
TLS, or lives under another path than the client's: those stay with the proxy
(`fleetgate serve`), which carries every byte itself. docs/kubernetes.md says why the
picker never injects credentials.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

from fleetgate.config.addresses import host_port
from fleetgate.fleet.model import Deployment, Provider

# the path every OpenAI-compatible base URL must end in for the client's path to fit as is
_CLIENT_ROOT = "/v1"


def provider_blocker(provider: Provider) -> str | None:
    """Why a picker cannot hand this provider's deployments to the data plane (None: it can)."""
    if provider.api_key is not None or provider.api_key_env is not None or provider.keys:
        return "its provider needs credentials, which only the proxy sends"
    if provider.headers:
        return "its provider adds headers, which only the proxy sends"
    url = urlsplit(provider.base_url)
    if url.scheme != "http":
        return f"its provider speaks {url.scheme}, and the data plane's endpoints are plain http"
    path = url.path.rstrip("/")
    root = ("", _CLIENT_ROOT) if provider.kind == "ollama" else (_CLIENT_ROOT,)
    if path not in root:
        return f"its base URL's path {path!r} is not the client's {_CLIENT_ROOT!r}"
    if host_port(provider.base_url) is None:
        return "its base URL names no port"
    return None


def deployment_blocker(dep: Deployment) -> str | None:
    return provider_blocker(dep.provider)


def proxy_only(deployments: Iterable[Deployment]) -> dict[str, str]:
    """Those of `deployments` a picker cannot hand to the data plane, with the reason
    (explain shows them: in picker mode they are skipped, in proxy mode they serve)."""
    out = {}
    for dep in deployments:
        reason = deployment_blocker(dep)
        if reason is not None:
            out[dep.id] = reason
    return out
