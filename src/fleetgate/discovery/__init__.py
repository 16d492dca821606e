"""Discovery: each worker's real context window, asked of the worker itself."""
