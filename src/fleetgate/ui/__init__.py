"""The dashboard at `/ui`: static files shipped in the package, reading the admin API."""
