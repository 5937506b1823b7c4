"""The one error shape of every failed request: `{"error": ..., "detail": ...}` (ErrorBody)."""

from __future__ import annotations

from fastapi.responses import JSONResponse

from .schemas import ErrorBody


def error(status: int, message: str, detail: list | None = None, headers: dict | None = None) -> JSONResponse:
    return JSONResponse(status_code=status, content=ErrorBody(error=message, detail=detail).model_dump(),
                        headers=headers)
