"""A task's arguments and return value as the JSON a database keeps: what ``WakesBackend`` accepts, and why.

Django's Tasks framework asks for JSON arguments and checks them with ``normalize_json`` (tuples
become lists, bytes text), which lets through two things JSON itself does not have:

* **object keys that are not strings** (``{1: "one"}``). Django's ``ImmediateBackend`` and
  ``DummyBackend`` hand the dict to the task as it was given; a backend that stores the call (Django's
  database backend, this one) stores JSON, whose keys are strings, so the task gets ``{"1": "one"}``.
  ``WakesBackend`` accepts them and converts them exactly as :func:`json.dumps` does (``1`` ->
  ``"1"``, ``1.5`` -> ``"1.5"``, ``True`` -> ``"true"``, ``None`` -> ``"null"``), as it stores a
  returned dict; two keys that would become the same string (``{1: "a", "1": "b"}``) are refused
  rather than one silently dropped.
* **NaN and infinities.** ``normalize_json`` keeps a float as it is, so the in-memory backends accept
  ``float("nan")``; but JSON cannot write it and no database's JSON column stores it (PostgreSQL's
  ``jsonb`` and the ``JSON_VALID`` checks of SQLite and MariaDB refuse the ``NaN`` token), so a
  database-backed task cannot carry it. ``WakesBackend`` refuses it at ``enqueue()`` with
  :class:`~django_wakes.tasks.exceptions.InvalidTaskArguments`, naming the argument, before anything
  is written: the one documented difference from the in-memory backends, tested side by side with
  them (``tests/test_tasks.py``). :mod:`django_wakes.tasks.checked` gives the in-memory backends the
  same check, for a project's tests.
"""

from __future__ import annotations

import math
from typing import Any

from ..exceptions import InvalidIntent, InvalidWake
from ..validation import json_value
from .compat import normalize_json
from .exceptions import InvalidTaskArguments


def _key_text(key: Any) -> str:
    """``key`` as :func:`json.dumps` writes an object key; ``TypeError`` for one it cannot write."""
    if isinstance(key, str):
        return key
    if key is True:
        return "true"
    if key is False:
        return "false"
    if key is None:
        return "null"
    if isinstance(key, int):
        return int.__repr__(key)
    if isinstance(key, float):
        if not math.isfinite(key):
            raise InvalidIntent(f"a key is {key!r}, which JSON cannot represent")
        return float.__repr__(key)
    raise TypeError(f"keys must be str, int, float, bool or None, not {type(key).__name__}")


def string_keys(value: Any, *, name: str) -> Any:
    """Return ``value`` with every object key a string, as JSON will store it; ``InvalidIntent`` on a collision.

    Iterative (a deep value is refused by the depth check after, not by Python's recursion limit here).
    """
    root: list[Any] = [value]
    stack: list[tuple[Any, Any, Any]] = [(root, 0, value)]
    while stack:
        parent, slot, item = stack.pop()
        if isinstance(item, dict):
            converted: dict[str, Any] = {}
            for key, member in item.items():
                try:
                    text = _key_text(key)
                except InvalidIntent as exc:
                    raise InvalidIntent(f"{name}: {exc}") from None
                if text in converted:
                    raise InvalidIntent(f"{name} has two keys that JSON writes as {text[:40]!r}")
                converted[text] = member
            parent[slot] = converted
            stack.extend((converted, key, member) for key, member in converted.items())
        elif isinstance(item, list):
            copied = list(item)
            parent[slot] = copied
            stack.extend((copied, index, member) for index, member in enumerate(copied))
    return root[0]


def json_arguments(args: Any, kwargs: Any) -> tuple[list[Any], dict[str, Any]]:
    """Return a call's arguments as the JSON the task will get back; raise :class:`InvalidTaskArguments`."""
    try:
        normal = string_keys(normalize_json({"args": list(args), "kwargs": dict(kwargs)}), name="arguments")
    except (TypeError, ValueError) as exc:
        if isinstance(exc, InvalidWake):
            raise InvalidTaskArguments(str(exc)) from exc
        raise InvalidTaskArguments(f"task arguments must be JSON: {exc}") from exc
    try:
        checked = json_value(normal, name="arguments")
    except InvalidWake as exc:
        raise InvalidTaskArguments(str(exc)) from exc
    return checked["args"], checked["kwargs"]
