"""Ray Serve: routing and onboarding over HTTP (plain cores in router.py, deployments in app.py)."""
