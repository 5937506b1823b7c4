"""Who may call: API keys with their scopes, budgets and limits in a SQL store (keys.py), and the guard
that checks every request's key before its body is read (guard.py)."""
