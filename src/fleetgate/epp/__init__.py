"""The endpoint picker front: Envoy carries the bytes, fleetgate decides where they go."""
