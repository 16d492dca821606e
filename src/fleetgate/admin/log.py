"""`GET /admin/requests` (filtered, cursor-paginated) and `GET /admin/requests/{id}`."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Query

from fleetgate.admin.openapi import responses
from fleetgate.errors import GatewayError, invalid
from fleetgate.store.request_log import parse_since

if TYPE_CHECKING:
    from fleetgate.control.plane import ControlPlane


def router(control: ControlPlane) -> APIRouter:
    r = APIRouter(tags=["request log"])

    @r.get("/admin/requests", summary="Logged requests, newest first")
    async def list_requests(
        model: str | None = None,
        key: str | None = Query(None, description="a client key's id"),
        deployment: str | None = Query(None, description="the deployment that answered"),
        status: str | None = Query(
            None,
            pattern=r"^(ok|error|[1-5][0-9][0-9])$",
            description="an HTTP status, `ok` or `error`",
        ),
        since: str | None = Query(None, description="epoch seconds or ISO-8601"),
        limit: int = Query(50, ge=1, le=1000),
        cursor: str | None = None,
    ) -> dict[str, Any]:
        if status is not None and status not in ("ok", "error") and not status.isdigit():
            raise invalid("`status` must be an HTTP status, `ok` or `error`.", "status")
        try:
            since_ts = parse_since(since) if since is not None else None
        except ValueError as exc:
            raise invalid("`since` must be epoch seconds or an ISO-8601 time.", "since") from exc
        try:
            page = await control.request_log.page(
                model=model,
                key=key,
                deployment=deployment,
                status=status,
                since=since_ts,
                limit=limit,
                cursor=cursor,
            )
        except ValueError as exc:
            raise invalid("`cursor` is not one this API gave out.", "cursor") from exc
        rows = [_linked(control, row) for row in page.rows]
        return {"data": rows, "next_cursor": page.next_cursor}

    @r.get(
        "/admin/requests/{request_id:path}",
        summary="One request with its attempts",
        responses=responses(404),
    )
    async def get_request(request_id: str) -> dict[str, Any]:
        row = await control.request_log.get(request_id)
        if row is None:
            raise GatewayError("not_found", f"No logged request {request_id!r}.")
        return _linked(control, row)

    return r


def _linked(control: ControlPlane, row: dict[str, Any]) -> dict[str, Any]:
    """The row with `trace_url`, its trace in the operator's tracing backend (None when the
    row has no trace id or `telemetry.trace_url` is unset)."""
    template = control.fleet.config.telemetry.trace_url
    trace_id = row.get("trace_id")
    row["trace_url"] = template.replace("{trace_id}", trace_id) if template and trace_id else None
    return row
