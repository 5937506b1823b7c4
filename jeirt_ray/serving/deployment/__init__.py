"""Running the service: Serve configs started and checked (deploy.py), the front door (ingress.py: Serve's
proxy or HAProxy), why replicas wait (placement.py), and the static checks of the Kubernetes manifests
(manifests.py)."""
