"""Ray Serve: routing, chat and onboarding over HTTP. The Router ingress and build_app in app.py, the
replicas behind it in replicas.py; each concern in its folder: access/ (keys and the guard), relay/ (the
OpenAI-compatible gateway), loop/ (the replica's part of the learning loop), deployment/ (starting,
ingress, Kubernetes checks), explorer/ (the web explorer)."""
