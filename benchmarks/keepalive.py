"""One keep-alive HTTP/1.1 connection for the benchmarks' sequential clients."""

from __future__ import annotations

import http.client
import time


class KeepAliveClient:
    """Requests one after the other on one connection, reopened when the server closes it
    (`reconnects` counts that)."""

    def __init__(self, port: int, timeout: float = 120) -> None:
        self.port = port
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        self.reconnects = 0

    def request(
        self, method: str, path: str, body: bytes | None = None
    ) -> tuple[float, int, dict[str, str], bytes]:
        """(seconds until the whole answer, status, lower-cased headers, body)."""
        headers = {"Content-Type": "application/json"} if body is not None else {}
        for attempt in range(2):
            started = time.perf_counter()
            try:
                self.conn.request(method, path, body, headers)
                resp = self.conn.getresponse()
                raw = resp.read()
            except (http.client.RemoteDisconnected, ConnectionError):
                self.conn.close()  # a kept-alive connection the server had closed
                self.reconnects += 1
                if attempt:
                    raise
                continue
            elapsed = time.perf_counter() - started
            if resp.will_close:
                self.conn.close()
                self.reconnects += 1
            return elapsed, resp.status, {k.lower(): v for k, v in resp.getheaders()}, raw
        raise AssertionError("unreachable")
