"""A client that goes away cancels its request's handling: through the connection layer's
hook behind fleetgate's own server, through a task on `receive()` behind any other."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from fleetgate.web.asgi import DISCONNECT_HOOK, DisconnectWatch


async def _handled(scope: dict[str, Any], receive: Any, lose: Any) -> bool:
    """Whether the handling was cancelled by the watch when `lose` ran."""
    loop = asyncio.get_running_loop()
    cancelled_by_watch = asyncio.Event()

    async def handler() -> None:
        watch = DisconnectWatch(receive, loop, scope)
        try:
            lose()
            await asyncio.sleep(10)  # the upstream call
        except asyncio.CancelledError:
            assert watch.cancelled
            await watch.absorb()
            cancelled_by_watch.set()
        finally:
            watch.finish()

    await asyncio.wait_for(loop.create_task(handler()), 5)
    return cancelled_by_watch.is_set()


async def test_the_connection_layer_hook_cancels_at_once_without_a_task() -> None:
    scope: dict[str, Any] = {DISCONNECT_HOOK: None}
    received = []

    async def receive() -> dict[str, Any]:
        received.append(1)  # behind the hook, nothing waits on receive()
        return {"type": "http.disconnect"}

    assert await _handled(scope, receive, lambda: scope[DISCONNECT_HOOK]())
    assert scope[DISCONNECT_HOOK] is None  # unhooked once the request ended
    await asyncio.sleep(0)
    assert received == []


@pytest.mark.parametrize("hooked", [False, True])
async def test_a_finished_request_is_not_cancelled(hooked: bool) -> None:
    scope: dict[str, Any] = {DISCONNECT_HOOK: None} if hooked else {}
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    loop = asyncio.get_running_loop()
    watch = DisconnectWatch(receive, loop, scope)
    watch.finish()
    gone.set()
    await asyncio.sleep(0)
    assert not watch.cancelled
    assert scope.get(DISCONNECT_HOOK) is None


async def test_behind_another_server_a_task_on_receive_hears_the_disconnect() -> None:
    gone = asyncio.Event()

    async def receive() -> dict[str, Any]:
        await gone.wait()
        return {"type": "http.disconnect"}

    assert await _handled({}, receive, gone.set)
