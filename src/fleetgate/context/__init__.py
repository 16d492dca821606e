"""Context-length tiers: the request's context estimate, window placement, exact counts."""
