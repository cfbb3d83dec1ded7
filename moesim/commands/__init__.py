"""Click command modules, one per area; moesim.cli assembles them into the `moesim` group."""
