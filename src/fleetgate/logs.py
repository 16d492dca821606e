"""The gateway's own log: its level, its format (`text`, or one JSON object a line), and the
named fields a line may carry for the JSON format.

A line that states an event passes its fields as `extra={"fields": {...}}` (see `fields`):
the text format shows the message alone (which already names them), the JSON format adds
them as keys, so a log pipeline can filter on `event` or `deployment` without parsing
prose. Fields hold ids and numbers, never prompt text or secrets.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any, Literal

LogFormat = Literal["text", "json"]
LEVELS = ("debug", "info", "warning", "error")
DEFAULT_LEVEL = "info"

_TEXT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
_HANDLER_NAME = "fleetgate"


def fields(**values: Any) -> dict[str, Any]:
    """The `extra` of a log call that carries named fields."""
    return {"fields": values}


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message, and the line's fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        extra = getattr(record, "fields", None)
        if isinstance(extra, dict):
            for key, value in extra.items():
                line.setdefault(key, value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(level: str = DEFAULT_LEVEL, fmt: LogFormat = "text") -> None:
    """Send every log line (fleetgate's and the server's) to stderr in `fmt`, from `level`
    up. Called again, it replaces the handler it installed before."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    handler = logging.StreamHandler()
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(_TEXT))
    root.addHandler(handler)
    logging.getLogger("fleetgate").setLevel(level.upper())
    # the server's own lines ("Started server process", ...) only from a warning up, unless
    # the operator asked for everything: the start line says what they said, and more
    server_level = "DEBUG" if level == "debug" else "WARNING"
    for name in ("uvicorn", "uvicorn.error"):
        logging.getLogger(name).setLevel(server_level)
