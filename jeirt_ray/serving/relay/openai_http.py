"""The OpenAI-compatible call that the gateway (gateway.py) and onboarding (api/endpoint.py)
both make: where a chat completion is posted, how the key is sent, which statuses may pass on a
second try, and reading an answer no larger than a cap."""

from __future__ import annotations

RETRY_STATUS = frozenset({408, 425, 429})  # and every 5xx: timeouts, too early, rate limits, the server's faults


class AnswerTooLarge(Exception):
    """An answer longer than the cap: not read on."""


def chat_url(base: str) -> str:
    """`<base>/chat/completions` for an API base URL such as http://127.0.0.1:8001/v1."""
    return f"{base.rstrip('/')}/chat/completions"


def bearer(key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"} if key else {}


def retryable(status: int) -> bool:
    """Whether an answer with this status may pass on a second try (or at another upstream)."""
    return status >= 500 or status in RETRY_STATUS


async def read_capped(chunks, cap: int) -> bytes:
    """A streamed response's body from its chunks (httpx's `aiter_bytes()`, aiohttp's
    `content.iter_any()`); AnswerTooLarge past `cap` bytes."""
    content = bytearray()
    async for chunk in chunks:
        content += chunk
        if len(content) > cap:
            raise AnswerTooLarge(f"answered more than {cap} bytes")
    return bytes(content)
