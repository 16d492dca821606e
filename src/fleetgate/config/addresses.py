"""`host:port` as a data plane names it: from a base URL, with IPv6 in brackets."""

from __future__ import annotations

import ipaddress
from urllib.parse import urlsplit


def host_port(base_url: str) -> tuple[str, int] | None:
    """The host and port a base URL names (None when it states no port and no http scheme)."""
    url = urlsplit(base_url)
    try:
        port = url.port
    except ValueError:
        return None
    if port is None:
        port = 80 if url.scheme == "http" else None
    if url.hostname is None or port is None:
        return None
    return url.hostname, port


def endpoint_text(host: str, port: int) -> str:
    """`ip:port` as the picker protocol spells it (an IPv6 address in brackets)."""
    try:
        is_v6 = ipaddress.ip_address(host).version == 6
    except ValueError:
        is_v6 = False
    return f"[{host}]:{port}" if is_v6 else f"{host}:{port}"


def is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
