"""Execute: send the plan's candidates upstream in order, with fallback."""
