"""A task's django-wakes options (attempts, backoff, lane), checked once and kept as JSON in the wake.

They travel in the wake's ``intent`` (``max_attempts`` also on the wake itself), so the runner that
fires the task applies the options the task was enqueued with, whatever the code says by then.
"""

from __future__ import annotations

import inspect
import string
from collections.abc import Mapping
from datetime import timedelta
from typing import Any, TypedDict

from ..durations import parse_duration
from ..exceptions import InvalidWake
from ..models import KEY_LENGTH
from ..validation import POSITIVE_INT_MAX, key
from .exceptions import InvalidTaskArguments, InvalidTaskOptions

#: ``backoff=`` as a mapping: the keys of ``WAKES["BACKOFF"]``.
BACKOFF_KEYS = frozenset({"BASE", "FACTOR", "MAX"})


def max_attempts(value: Any, *, name: str = "max_attempts") -> int | None:
    """``None`` (the backend's default) or an int from 1 to 2,147,483,647."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= POSITIVE_INT_MAX:
        raise InvalidTaskOptions(f"{name} must be an int from 1 to {POSITIVE_INT_MAX}, not {value!r}")
    return value


def backoff(value: Any, *, name: str = "backoff") -> dict[str, float] | None:
    """Normalise ``backoff=`` to ``{"base": s, "factor": f, "max": s}`` (seconds), or ``None``.

    A duration (``"30s"``, a ``timedelta``) is a fixed delay between attempts; a mapping with the keys
    of ``WAKES["BACKOFF"]`` grows it: ``BASE × FACTOR ** (attempt - 1)``, capped at ``MAX``.
    """
    if value is None:
        return None
    try:
        if isinstance(value, Mapping):
            unknown = set(value) - BACKOFF_KEYS
            if unknown or "BASE" not in value:
                raise InvalidTaskOptions(
                    f"{name}: a mapping needs BASE and may have FACTOR and MAX (got {sorted(value)})"
                )
            base = parse_duration(value["BASE"], name=f"{name}['BASE']").total_seconds()
            factor = value.get("FACTOR", 1.0)
            if isinstance(factor, bool) or not isinstance(factor, int | float) or not 1.0 <= factor <= 100.0:
                raise InvalidTaskOptions(f"{name}['FACTOR'] must be a number from 1 to 100, not {factor!r}")
            cap = parse_duration(value.get("MAX", "1d"), name=f"{name}['MAX']").total_seconds()
            return {"base": base, "factor": float(factor), "max": max(cap, base)}
        if isinstance(value, str | timedelta):
            seconds = parse_duration(value, name=name).total_seconds()
            return {"base": seconds, "factor": 1.0, "max": seconds}
    except InvalidTaskOptions:
        raise
    except InvalidWake as exc:
        raise InvalidTaskOptions(str(exc)) from exc
    raise InvalidTaskOptions(f"{name} must be a duration ('30s', a timedelta) or a BASE/FACTOR/MAX mapping")


def backoff_delay(spec: dict[str, float], attempt: int) -> timedelta:
    """The delay after failed attempt number ``attempt`` (1-based) under a normalised ``spec``."""
    try:
        seconds = spec["base"] * spec["factor"] ** max(attempt - 1, 0)
    except OverflowError:
        seconds = spec["max"]
    return timedelta(seconds=min(seconds, spec["max"]))


def lane_template(value: Any, *, name: str = "serial_key") -> str | None:
    """Check a lane template: ``"account:{account_id}"`` is filled from the task's arguments at enqueue."""
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidTaskOptions(f"{name} must be a non-empty str (a lane, or a template such as 'user:{{user_id}}')")
    try:
        fields = [field for _, field, _, _ in string.Formatter().parse(value) if field is not None]
    except ValueError as exc:
        raise InvalidTaskOptions(f"{name} {value!r} is not a valid template: {exc}") from exc
    for field in fields:
        if not field or not (field.isidentifier() or field.isdigit()):
            raise InvalidTaskOptions(
                f"{name}: {{{field}}} must name an argument (a keyword such as {{user_id}} or a position such as {{0}})"
            )
    return value


class TaskKeys(TypedDict):
    """The keys of one enqueued task that are templates filled from its arguments."""

    serial_key: str | None
    limit_key: str | None


def filled_keys(task: Any, args: list[Any], kwargs: dict[str, Any]) -> TaskKeys:
    """``serial_key`` and ``limit_key`` of one enqueued ``task``, each template filled from its arguments.

    What the backend's ``enqueue()`` and a periodic task's booking both pass to ``schedule()``.
    """

    def filled(name: str) -> str | None:
        template = getattr(task, name, None)
        return fill_lane(template, args, kwargs, func=task.func, takes_context=task.takes_context, name=name)

    return TaskKeys(serial_key=filled("serial_key"), limit_key=filled("limit_key"))


def fill_lane(
    template: str | None,
    args: list[Any],
    kwargs: dict[str, Any],
    *,
    func: Any = None,
    takes_context: bool = False,
    name: str = "serial_key",
) -> str | None:
    """The lane (or, with ``name="limit_key"``, the limit key) of one enqueued task: its template filled from the
    (JSON) arguments.

    ``{name}`` finds an argument however it was passed (``f("acme")`` and ``f(account="acme")``
    fill ``{account}`` alike, read from ``func``'s signature); ``{0}`` is the first positional one.
    """
    if template is None:
        return None
    named = dict(kwargs)
    if func is not None:
        try:
            signature = inspect.signature(func)
            params = list(signature.parameters.values())[1 if takes_context else 0 :]
            bound = signature.replace(parameters=params).bind_partial(*args, **kwargs)
            named = {**bound.arguments, **kwargs}
        except (TypeError, ValueError):
            pass  # arguments the function cannot take: the task will fail on them, the lane uses what is there
    try:
        lane = template.format(*args, **named)
    except (KeyError, IndexError) as exc:
        raise InvalidTaskArguments(f"{name} {template!r} names an argument this call does not pass: {exc}") from exc
    try:
        return key(lane, name=name, max_length=KEY_LENGTH)
    except InvalidWake as exc:
        raise InvalidTaskArguments(str(exc)) from exc


#: django-wakes' own options of a task, which ``using()`` may change for one call.
CALL_OPTIONS = ("max_attempts", "backoff", "serial_key", "limit_key")


def chosen(task: Any, declared: Any) -> dict[str, Any]:
    """The options ``task`` has of its own (given with ``using()``): those that differ from ``declared``'s.

    Kept in the wake's intent as JSON, so the task read back (``get_result(id).task``) equals the one
    enqueued. ``declared`` is the decorated task (``None`` if it cannot be imported: every option is kept).
    """
    found = {}
    for name in CALL_OPTIONS:
        value = getattr(task, name, None)
        if value != getattr(declared, name, None):
            found[name] = _encode(value)
    return found


def decoded(data: Any) -> dict[str, Any]:
    """The options :func:`chosen` kept, as ``using()`` takes them."""
    if not isinstance(data, dict):
        return {}
    return {name: _decode(value) for name, value in data.items() if name in CALL_OPTIONS}


def _encode(value: Any) -> dict[str, Any]:
    """An option value as JSON that decodes to an equal value (a ``timedelta`` stays a ``timedelta``)."""
    if isinstance(value, timedelta):
        return {"timedelta": [value.days, value.seconds, value.microseconds]}
    if isinstance(value, Mapping):
        return {"mapping": {str(part): _encode(item) for part, item in value.items()}}
    return {"value": value}


def _decode(data: dict[str, Any]) -> Any:
    if "timedelta" in data:
        days, seconds, microseconds = data["timedelta"]
        return timedelta(days=days, seconds=seconds, microseconds=microseconds)
    if "mapping" in data:
        return {part: _decode(item) for part, item in data["mapping"].items()}
    return data["value"]
