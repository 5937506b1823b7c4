"""`python -m jeirt_ray.cli`: the same as the `jeirt` command."""

from .main import main

main()
