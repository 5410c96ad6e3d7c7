"""selector's Hydra sweeper plugin (Hydra looks for plugins under the hydra_plugins namespace)."""
