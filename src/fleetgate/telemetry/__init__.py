"""OpenTelemetry: GenAI spans and metrics, built from request records off the request path."""
