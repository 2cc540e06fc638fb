"""Characters that must not reach a log line or a terminal as they are: finding them, and escaping them.

An identifier (a workspace, a session, a lane, a key) is chosen by a caller, sometimes by a model or a
webhook sender, and is printed by the runner's log lines, ``manage.py wakes status`` and the console.
A line feed in it forges a second log line; an ESC starts an ANSI/OSC sequence a terminal obeys (a
title, a hyperlink, a cleared screen); a right-to-left override (U+202E) makes text read in another
order than it is stored. So :mod:`django_wakes.validation` refuses these characters in identifiers
(:func:`control_character`), and whatever prints a value that may still hold one (a row written
before the refusal, or by raw SQL; an exception's text) escapes it first (:func:`printable`).

The characters: the C0 controls (U+0000-U+001F, tab and line feed included), DEL (U+007F), the C1
controls (U+0080-U+009F), Unicode's format characters (category ``Cf``: the bidi overrides and
isolates, zero-width characters, the BOM, ...), the line and paragraph separators (U+2028, U+2029)
and lone surrogates. Anything else, any letter or symbol of any script, is left alone.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["control_character", "printable"]

#: Every character that is not printable ASCII: the only ones worth a look (most identifiers have none).
_NOT_PLAIN = re.compile("[^\x20-\x7e]")

#: The Unicode categories escaped and refused: controls, format characters, line/paragraph separators, surrogates.
_CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def _is_control(char: str) -> bool:
    return unicodedata.category(char) in _CONTROL_CATEGORIES


def control_character(text: str) -> tuple[int, str] | None:
    """The position and the first control or format character of ``text``, or ``None`` if it has none."""
    for found in _NOT_PLAIN.finditer(text):
        char = found.group()
        if _is_control(char):
            return found.start(), char
    return None


def _escape(found: re.Match[str]) -> str:
    char = found.group()
    if not _is_control(char):
        return char
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def printable(text: str) -> str:
    """``text`` with each control or format character written as its escape (``\\n`` is ``\\x0a``).

    Printable text comes back as the same object, so the common case costs one regular-expression scan.
    A backslash is left as it is: the escapes are for a person reading a line, not to be decoded.
    """
    if _NOT_PLAIN.search(text) is None or control_character(text) is None:
        return text
    return _NOT_PLAIN.sub(_escape, text)
