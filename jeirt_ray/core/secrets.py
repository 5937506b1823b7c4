"""Credentials never leave the process in a message: `redact` strips them from any text (the
user:password of a URI, a token in a query string, a bearer token), and `RedactingFilter` does
the same to log records before any handler writes them."""

from __future__ import annotations

import logging
import re

_PATTERNS = [
    (re.compile(r"([A-Za-z][A-Za-z0-9+.-]*://)[^/\s@'\"]+@"), r"\1***@"),  # scheme://user:password@host
    (re.compile(r"(?i)([?&](?:token|key|api_key|apikey|password|secret|access_token)=)[^&\s'\"]+"), r"\1***"),
    (re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\1***"),
    (re.compile(r"\bjrk_[0-9a-f]{8}_[A-Za-z0-9_-]{16,}"), "jrk_***"),  # our own API keys
]


def redact(text: str) -> str:
    """`text` with every credential it carries replaced by ***."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


class RedactingFilter(logging.Filter):
    """Rewrites a record's message (and its traceback) with `redact`; never drops a record."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record whose arguments do not fit its format: leave it to the handler
            return True
        record.msg, record.args = redact(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text)
            record.exc_info = None  # the handler prints exc_text, not a fresh formatting of the exception
        return True


def redact_logs(*loggers: str) -> None:
    """Put one RedactingFilter on the root logger's handlers and on each named logger and its
    handlers (filters on a logger see only its own records; on a handler, every record it writes)."""
    targets = [logging.getLogger()] + [logging.getLogger(n) for n in loggers]
    for logger in targets:
        for holder in [logger, *logger.handlers]:
            if not any(isinstance(f, RedactingFilter) for f in holder.filters):
                holder.addFilter(RedactingFilter())
