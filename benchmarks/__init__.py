"""Gateway overhead benchmark: a fast fake upstream, and the same load direct and via fleetgate."""
