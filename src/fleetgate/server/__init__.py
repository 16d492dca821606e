"""The ASGI server: endpoints, responses, lifespan."""
