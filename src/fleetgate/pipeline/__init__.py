"""The request pipeline, whatever front feeds it: admit → plan → refine → hold → execute →
record (`core.py`), the per-request facts it carries (`exchange.py`), what a refusal or an
answer says back (`respond.py`, `error_shapes.py`) and the plan shown without sending
(`explain.py`). It knows no socket: the ASGI proxy and any other front turn its outcome
into bytes."""
