"""Validate create-call arguments before anything is written."""

from __future__ import annotations

import json
from typing import Any

from .conf import wakes_settings
from .exceptions import InvalidIntent, InvalidWake
from .models import KEY_LENGTH


def json_value(value: Any, *, name: str) -> Any:
    """Return ``value`` unchanged if it is plain JSON within ``INTENT_MAX_BYTES``; raise otherwise.

    The value is round-tripped so what the sink later reads is exactly what was stored (tuples become
    lists here, not silently in the database), and NaN/Infinity are refused because JSON has none.
    """
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise InvalidIntent(f"{name} is not JSON-serialisable: {exc}") from exc
    limit = wakes_settings.intent_max_bytes
    size = len(text.encode())
    if size > limit:
        raise InvalidIntent(f"{name} is {size} bytes of JSON; the limit (WAKES['INTENT_MAX_BYTES']) is {limit}")
    return json.loads(text)


def key(value: Any, *, name: str, required: bool = True) -> str | None:
    """Return a stripped identifier string (workspace, session, lane, event key, ...)."""
    if value is None:
        if required:
            raise InvalidWake(f"{name} is required")
        return None
    if not isinstance(value, str | int) or isinstance(value, bool):
        raise InvalidWake(f"{name} must be a string, got {type(value).__name__}")
    text = str(value)
    if not text.strip():
        raise InvalidWake(f"{name} must not be empty")
    if len(text) > KEY_LENGTH:
        raise InvalidWake(f"{name} is longer than {KEY_LENGTH} characters")
    return text


def positive_int(value: Any, *, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidWake(f"{name} must be a positive integer, got {value!r}")
    return value
