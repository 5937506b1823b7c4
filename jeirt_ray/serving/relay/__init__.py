"""The OpenAI-compatible relay: the gateway that calls the upstream LLMs in a policy's order, meters their
answers and prices them (gateway.py), and the one OpenAI-compatible HTTP call it and onboarding make
(openai_http.py)."""
