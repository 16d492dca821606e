"""What every HTTP front shares: the ASGI primitives and the package's static files."""
