"""The store's one error for operators (kept free of SQLAlchemy, so the CLI and the ASGI
app can catch it without importing the database layer)."""

from __future__ import annotations


class StoreUnavailable(Exception):
    """The store cannot be used: an unsupported URL, or a database that cannot be opened.
    The message names the (password-free) URL and what to check."""
