"""Routing: policies that turn a space's predictions into one LLM per query (`policies`, `router`), costs (`costs`) and how routers are scored (`outcomes`). Nothing here trains."""
