"""Routing: resolve a model name to candidates, filter them, order them into a plan."""
