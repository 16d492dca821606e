"""How a store's URL, as `database.database_url` writes it, names PostgreSQL: the one place
the serving process's connections (`db.py`), the request log's writer (`driver_log.py`) and
the URL's own normalisation agree on. The writer process imports it too, so it imports
nothing."""

from __future__ import annotations

POSTGRES_URL = "postgresql+psycopg://"  # a PostgreSQL store's URL, driven by psycopg 3


def is_postgres(url: str) -> bool:
    return url.startswith(POSTGRES_URL)


def psycopg_conninfo(url: str) -> str:
    """What `psycopg.connect` takes for a PostgreSQL store's URL."""
    return "postgresql://" + url.removeprefix(POSTGRES_URL)
