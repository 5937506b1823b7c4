"""The Ray layer: thin wrappers that run the plain core on a Ray cluster."""
