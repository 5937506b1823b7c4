"""Ray Serve: routing, chat and onboarding over HTTP (the Router ingress and build_app in app.py,
the replicas behind it in replicas.py, plain parts in the other modules)."""
