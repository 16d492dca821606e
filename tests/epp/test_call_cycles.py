"""A gRPC call that is done lets go of its handler. Every handler refers to its call, so
the two were a cycle, left to the cyclic collector for each call (two a picked request):
the picker spent a fifth more CPU on a 20-chunk stream at 16 connections with them."""

from __future__ import annotations

import gc
from collections.abc import Callable

import pytest

from fleetgate.epp.grpc_calls import IGNORED, Call


class _Conn:
    """What a call writes to: nothing is kept."""

    def send_headers(self, *args: object, **kwargs: object) -> None:
        pass

    def send_data(self, *args: object) -> None:
        pass

    def send_whole(self, *args: object) -> None:
        pass


class _Handler:
    """A handler as the picker's are: it refers to its call."""

    def __init__(self, call: Call) -> None:
        self.call = call
        self.cancelled = False

    def message(self, data: bytes) -> None:
        self.call.send(data)

    def end(self) -> None:
        self.call.finish()

    def cancel(self) -> None:
        self.cancelled = True


ENDINGS: dict[str, Callable[[Call], None]] = {
    "answered": lambda call: call.answer(b"pick"),
    "finished": lambda call: call.finish(),
    "ended by the peer": lambda call: call.end(),
    "reset by the peer": lambda call: call.reset(),
}


@pytest.mark.parametrize("ending", ENDINGS)
def test_a_done_call_leaves_nothing_for_the_collector(ending: str) -> None:
    gc.collect()
    gc.disable()
    try:
        call = Call(_Conn(), 1, {})  # type: ignore[arg-type]
        handler = _Handler(call)
        call.handler = handler
        call.data(b"\0\0\0\0\3abc")  # one message, answered in part
        ENDINGS[ending](call)
        assert call.done and call.handler is IGNORED
        assert handler.cancelled == (ending == "reset by the peer")
        call.data(b"\0\0\0\0\3abc")  # a done call tells its handler nothing more
        call.reset()
        del call, handler
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        left = [type(o).__name__ for o in gc.garbage if isinstance(o, Call | _Handler)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []
