"""Validate what callers hand the public API before anything is written.

Every value one of the three supported databases would refuse (or store differently) is refused
here first, with a :class:`~django_wakes.exceptions.WakeError` subclass naming the field, so a call
behaves the same on SQLite, PostgreSQL and MariaDB:

- PostgreSQL stores no NUL (U+0000) in text, varchar or jsonb, and MariaDB's ``JSON_VALID`` check
  refuses JSON nested 32 levels deep;
- no database driver can send a surrogate code point (U+D800-U+DFFF): the text is not UTF-8;
- PostgreSQL and MariaDB (strict mode) refuse a string longer than its column, SQLite stores it;
- PostgreSQL's ``integer`` (a ``PositiveIntegerField``) stops at 2,147,483,647.

User JSON is walked iteratively (never recursively) so no nesting depth can raise ``RecursionError``.
"""

from __future__ import annotations

import json
import math
import re
from datetime import datetime
from typing import Any, Literal, overload

from .conf import wakes_settings
from .durations import plain_duration
from .exceptions import InvalidIntent, InvalidTime, InvalidWake
from .models import KEY_LENGTH
from .text import control_character

#: The deepest nesting of lists and objects allowed in an intent, event payload, approval answer or
#: ``once()`` result. MariaDB's ``JSON_VALID`` refuses 32 levels, and a payload or an answer is stored
#: one level down, inside the ``result`` object the sink receives: 30 + 1 stays under it.
JSON_MAX_DEPTH = 30

#: The longest approval prompt, in characters: a question for a person, not a document.
PROMPT_MAX_LENGTH = 10_000

#: The largest value of a ``PositiveIntegerField`` on every database (PostgreSQL's ``integer``).
POSITIVE_INT_MAX = 2_147_483_647

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")

#: What an approval token's stored form looks like (``hash_token``: a SHA-256 hex digest).
_TOKEN_HASH = re.compile("[0-9a-f]{64}")

_Path = tuple[Any, str | int] | None  # (parent path, key or index): made text only for an error message


#: The range of ``Wake.priority`` (a SmallIntegerField on every database).
PRIORITY_MIN, PRIORITY_MAX = -32768, 32767


def _unstorable(text: str) -> str | None:
    """Say why ``text`` cannot be stored the same way on every database, or return ``None``."""
    found = _UNSTORABLE.search(text)
    if found is None:
        return None
    char = found.group()
    if char == "\x00":
        return f"contains a NUL character (U+0000) at position {found.start()}, which PostgreSQL cannot store"
    return (
        f"contains a surrogate code point (U+{ord(char):04X}) at position {found.start()}: "
        "it is not valid Unicode text (UTF-8)"
    )


def _path_text(name: str, path: _Path) -> str:
    """``intent['items'][3]``: the path of a value, from the (parent, key or index) links of the walk."""
    segments: list[str] = []
    while path is not None:
        path, step = path
        text = str(step) if isinstance(step, int) else repr(step)
        segments.append(f"[{text[:40]}...]" if len(text) > 43 else f"[{text}]")
    return name + "".join(reversed(segments))


def json_value(value: Any, *, name: str) -> Any:
    """Return ``value`` as it will be stored if it is plain JSON every database accepts; raise otherwise.

    Plain JSON: ``dict`` with ``str`` keys, ``list`` (or ``tuple``), ``str``, ``int``, ``bool``,
    finite ``float`` and ``None``, nested at most :data:`JSON_MAX_DEPTH` levels, no string or key
    holding a NUL or a surrogate, at most ``WAKES["INTENT_MAX_BYTES"]`` bytes once serialised.
    The value is round-tripped so what the sink later reads is exactly what was stored (tuples
    become lists here, not silently in the database). :class:`InvalidIntent` names the offending
    value's path, e.g. ``intent['items'][3]``.
    """
    limit = wakes_settings.intent_max_bytes
    # A lower bound of the serialised size, so a huge value is refused before it is all walked:
    # a scalar is at least one byte, a string its length and quotes, a container its brackets, commas, colons.
    least = 0
    stack: list[tuple[Any, _Path, int]] = [(value, None, 0)]
    while stack:
        item, path, depth = stack.pop()
        if item is None or isinstance(item, bool | int):
            least += 1
        elif isinstance(item, str):
            least += len(item) + 2
            problem = _unstorable(item)
            if problem:
                raise InvalidIntent(f"{_path_text(name, path)} {problem}")
        elif isinstance(item, float):
            least += 1
            if not math.isfinite(item):
                raise InvalidIntent(f"{_path_text(name, path)} is {item!r}, which JSON cannot represent")
        elif isinstance(item, dict | list | tuple):
            if depth >= JSON_MAX_DEPTH:
                raise InvalidIntent(
                    f"{_path_text(name, path)} is nested deeper than {JSON_MAX_DEPTH} levels of lists and objects"
                )
            least += 1 + max(len(item), 1) + (3 * len(item) if isinstance(item, dict) else 0)  # "":
            if least > limit:
                break
            if isinstance(item, dict):
                for k, v in item.items():
                    if not isinstance(k, str):
                        kind = type(k).__name__
                        raise InvalidIntent(f"{_path_text(name, path)} has a key of type {kind}: JSON keys are strings")
                    problem = _unstorable(k)
                    if problem:
                        raise InvalidIntent(f"{_path_text(name, path)} has a key that {problem}")
                    least += len(k)
                    stack.append((v, (path, k), depth + 1))
            else:
                stack.extend((v, (path, i), depth + 1) for i, v in enumerate(item))
        else:
            raise InvalidIntent(f"{_path_text(name, path)} is a {type(item).__name__}, which is not JSON")
        if least > limit:
            break
    if least > limit:
        raise InvalidIntent(f"{name} is more than {limit} bytes of JSON, the limit (WAKES['INTENT_MAX_BYTES'])")
    try:
        text = json.dumps(value, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:  # e.g. an int of more digits than Python will print
        raise InvalidIntent(f"{name} is not JSON-serialisable: {exc}") from exc
    size = len(text.encode())
    if size > limit:
        raise InvalidIntent(f"{name} is {size} bytes of JSON; the limit (WAKES['INTENT_MAX_BYTES']) is {limit}")
    return json.loads(text)


def printable_identifier(value: str, *, name: str) -> str:
    """Return ``value`` if it holds no control or format character; raise :class:`InvalidWake` naming ``name``.

    The characters are :mod:`django_wakes.text`'s: C0 controls (line feed and tab too), DEL, C1
    controls, format characters (the bidi overrides such as U+202E, zero-width ones) and the line and
    paragraph separators (U+2028, U+2029). An identifier is printed in log lines and terminals, where
    such a character would forge a line or send the terminal an escape sequence. Every identifier the
    public API takes passes here through :func:`key`; a new one (a limit key, say) calls :func:`key`
    or this.
    """
    found = control_character(value)
    if found is not None:
        position, char = found
        raise InvalidWake(
            f"{name} contains a control character (U+{ord(char):04X}) at position {position}: "
            "identifiers are printed in logs and terminals, so control and format characters are refused"
        )
    return value


@overload
def key(value: Any, *, name: str, required: Literal[True] = ..., max_length: int = ...) -> str: ...
@overload
def key(value: Any, *, name: str, required: bool, max_length: int = ...) -> str | None: ...
def key(value: Any, *, name: str, required: bool = True, max_length: int = KEY_LENGTH) -> str | None:
    """Return an identifier (workspace, session, lane, event key, ...) exactly as given, if storable.

    A non-blank ``str`` of at most ``max_length`` characters (the column's length, which SQLite
    alone does not enforce) with no NUL, no surrogate and no other control or format character
    (:func:`printable_identifier`). Nothing is stripped: the key is stored as given. ``None`` is
    allowed when not ``required``.
    """
    if value is None:
        if required:
            raise InvalidWake(f"{name} is required")
        return None
    if not isinstance(value, str):
        raise InvalidWake(f"{name} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise InvalidWake(f"{name} must not be empty or blank")
    if len(value) > max_length:
        raise InvalidWake(f"{name} is {len(value)} characters long; the limit is {max_length}")
    problem = _unstorable(value)
    if problem:
        raise InvalidWake(f"{name} {problem}")
    return printable_identifier(value, name=name)


def recent_enough(moment: datetime, now: datetime, *, name: str = "at") -> datetime:
    """Return ``moment`` unless it lies further in the past than ``WAKES["PAST_AT_LIMIT"]`` (``None``: any).

    A wake scheduled years back fires at once all the same, so such a time says nothing but a
    mistake (a wrong year, seconds read as milliseconds), and its "lateness" of years would skew
    every lateness figure. Refused with :class:`InvalidTime`, the bound in the message.
    """
    limit = wakes_settings.past_at_limit
    if limit is not None and now - moment > limit:
        raise InvalidTime(
            f"{name} {moment.isoformat()} is {plain_duration(now - moment)} in the past, more than "
            f"WAKES['PAST_AT_LIMIT'] ({plain_duration(limit)}) allows: give a later time, or delay='0s' to fire now"
        )
    return moment


def prompt_text(value: Any, *, name: str = "prompt") -> str:
    """Return an approval prompt as given: a non-blank ``str`` of at most :data:`PROMPT_MAX_LENGTH` characters."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidWake(f"{name} must be a non-empty string")
    if len(value) > PROMPT_MAX_LENGTH:
        raise InvalidWake(f"{name} is {len(value)} characters long; the limit is {PROMPT_MAX_LENGTH}")
    problem = _unstorable(value)
    if problem:
        raise InvalidWake(f"{name} {problem}")
    return value


def positive_int(value: Any, *, name: str) -> int:
    """Return ``value`` if it is an ``int`` (not a ``bool``) from 1 to :data:`POSITIVE_INT_MAX`."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= POSITIVE_INT_MAX:
        raise InvalidWake(f"{name} must be an integer from 1 to {POSITIVE_INT_MAX}, got {value!r:.40}")
    return value


def priority_value(value: Any, *, name: str = "priority") -> int:
    """A claim priority: an int that fits the column (a higher one is claimed first among due wakes)."""
    if isinstance(value, bool) or not isinstance(value, int) or not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise InvalidWake(f"{name} must be an int from {PRIORITY_MIN} to {PRIORITY_MAX}, got {value!r}")
    return value


def wake_pk(value: Any, *, caller: str) -> int:
    """Return ``value`` if it is an ``int`` (not a ``bool``, not a numeric string): a wake's id.

    Any int is accepted: an id no wake has (0, negative, beyond 64 bits) is simply not found.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidWake(f"{caller} takes a wake id (an int), got {type(value).__name__}")
    return value


def well_formed_token(value: Any) -> bool:
    """Whether ``value`` could be an approval token: a non-empty ``str`` that is valid Unicode text."""
    return isinstance(value, str) and bool(value) and _SURROGATE.search(value) is None


def well_formed_token_hash(value: Any) -> bool:
    """Whether ``value`` could be a stored token hash (what ``hash_token`` returns): 64 hex digits."""
    return isinstance(value, str) and _TOKEN_HASH.fullmatch(value) is not None
