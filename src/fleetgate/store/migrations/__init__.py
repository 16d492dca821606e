"""Alembic migrations for the store, run programmatically at start-up (see store/migrate.py)."""
