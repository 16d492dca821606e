"""Ingress: protocol adapters that parse a body into a `RequestProfile`."""
