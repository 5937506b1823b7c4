"""Experiments on one dataset and split: `prepare` (data, split, embeddings), `selection` (the
per-dataset search's settings and domains), `methods` (train and score every method) and
`routing_choice` (choose a space's routing policy on validation). Plain code: the Ray search and
fit functions are passed in by the layer above (`api.jobs`), never imported from here."""
