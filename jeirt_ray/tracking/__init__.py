"""MLflow: runs, metrics and artifacts (`runs.Tracker`) and the registry of spaces
(`registry.SpaceRegistry`)."""
