"""`fleetgate` subcommands that work on the configured store without a running gateway."""
