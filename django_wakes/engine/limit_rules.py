"""Which limits a wake's start is held to: ``WAKES["LIMITS"]`` per key, ``WAKES["WORKSPACE_LIMIT"]`` per workspace.

::

    WAKES = {
        "LIMITS": {
            "mailer": {"concurrency": 5, "rate": "100/1m"},  # the key "mailer"
            "crm:*": {"rate": "10/1s"},                      # each key starting "crm:", each on its own
        },
        "WORKSPACE_LIMIT": {"concurrency": 20},              # each workspace on its own (or a dotted path)
    }

A wake's ``limit_key`` is matched exactly, else by the longest ``prefix:*`` entry; the limit applies
to each matching key separately (``crm:acme`` and ``crm:globex`` have 10 starts a second each). A key
no entry matches is not limited. ``concurrency``: at most N wakes of the key ``firing`` at once;
``rate``: at most N started in any window of the period (``"N/<duration>"``, durations as everywhere,
e.g. ``"100/1m"``, ``"10/1s"``). This module reads and checks the settings and says which
:class:`Limit` s a wake is under; :mod:`.limit_slots` enforces them in the claim transaction.

A malformed entry is a system check error (``django_wakes.E020``/``E021``, :func:`problems`); at run
time it is left out (logged once), never a crash.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.utils.module_loading import import_string

from ..conf import wakes_settings
from ..durations import parse_duration
from ..exceptions import InvalidLimit, InvalidWake
from ..logs import logger
from ..models import KEY_LENGTH
from ..states import LimitKind, LimitScope
from ..validation import key, positive_int
from .shared import db_alias

#: What a limit entry may set.
LIMIT_NAMES = frozenset(kind.value for kind in LimitKind)
#: How long a process keeps what ``WORKSPACE_LIMIT``'s function answered for a workspace, in seconds.
ASK_EVERY = 60.0
#: ... for at most this many workspaces at once.
ASKED_MAX = 10_000
#: The most slots one limit may have (a slot is a row): a rate beyond it is better written per shorter period.
MAX_SIZE = 10_000
_RATE = re.compile(r"\s*(\d+)\s*/\s*(\S+)\s*")


@dataclass(frozen=True)
class Limit:
    """One limit on one key or workspace: at most ``size`` wakes firing at once, or started per ``period``."""

    scope: LimitScope
    #: The ``limit_key`` or the workspace id.
    name: str
    kind: LimitKind
    size: int
    #: A rate's period (``None`` for concurrency).
    period: timedelta | None = None
    #: As written in the settings: ``5`` or ``"100/1m"``.
    written: str = ""
    #: The ``WAKES["LIMITS"]`` entry that matched (``"mailer"``, ``"crm:*"``); ``""`` for a workspace limit.
    entry: str = ""

    @property
    def bucket(self) -> tuple[str, str, str]:
        """Whose slots these are: ``(scope, name, kind)``, the key of :class:`~django_wakes.models.LimitSlot` rows."""
        return (str(self.scope), self.name, str(self.kind))

    @property
    def text(self) -> str:
        """``concurrency 5`` or ``rate 100/1m``."""
        return f"{self.kind} {self.written}"

    @property
    def label(self) -> str:
        """For people: ``limit "mailer" (concurrency 5)``, ``workspace acme's limit (rate 10/1s)``."""
        if self.scope == LimitScope.WORKSPACE:
            return f"workspace {self.name}'s limit ({self.text})"
        via = f', entry "{self.entry}"' if self.entry and self.entry != self.name else ""
        return f'limit "{self.name}" ({self.text}{via})'


def parse_rate(value: Any, *, name: str = "rate") -> tuple[int, timedelta]:
    """``"100/1m"`` -> ``(100, 1 minute)``: N starts per period; raise :class:`InvalidLimit` otherwise."""
    found = _RATE.fullmatch(value) if isinstance(value, str) else None
    if found is None:
        raise InvalidLimit(f"{name} must be 'N/<duration>', such as '100/1m' or '10/1s', got {value!r:.60}")
    size = int(found.group(1))
    if not 1 <= size <= MAX_SIZE:
        raise InvalidLimit(f"{name}: N must be from 1 to {MAX_SIZE}, got {size}")
    try:
        period = parse_duration(found.group(2), name=name, allow_zero=False)
    except InvalidWake as exc:
        raise InvalidLimit(str(exc)) from exc
    return size, period


def _concurrency(value: Any, *, name: str) -> int:
    try:
        size = positive_int(value, name=name)
    except InvalidWake as exc:
        raise InvalidLimit(str(exc)) from exc
    if size > MAX_SIZE:
        raise InvalidLimit(f"{name} must be at most {MAX_SIZE}, got {size}")
    return size


@dataclass(frozen=True)
class Entry:
    """One parsed limit entry: ``{"concurrency": 5, "rate": "100/1m"}``."""

    concurrency: int | None = None
    rate: tuple[int, timedelta, str] | None = None

    def limits(self, scope: LimitScope, name: str, entry: str = "") -> list[Limit]:
        found = []
        if self.concurrency is not None:
            found.append(
                Limit(scope, name, LimitKind.CONCURRENCY, self.concurrency, None, str(self.concurrency), entry)
            )
        if self.rate is not None:
            size, period, written = self.rate
            found.append(Limit(scope, name, LimitKind.RATE, size, period, written, entry))
        return found


def parse_entry(value: Any, *, name: str) -> Entry:
    """Check one entry (a dict of ``concurrency`` and/or ``rate``); raise :class:`InvalidLimit` naming it."""
    if not isinstance(value, dict) or not value:
        raise InvalidLimit(f"{name} must be a dict with 'concurrency' and/or 'rate', got {value!r:.100}")
    unknown = sorted(str(k) for k in value if k not in LIMIT_NAMES)
    if unknown:
        raise InvalidLimit(f"{name} has unknown key(s) {', '.join(repr(k)[:40] for k in unknown[:5])}")
    concurrency = value.get("concurrency")
    rate = value.get("rate")
    return Entry(
        concurrency=None if concurrency is None else _concurrency(concurrency, name=f"{name}['concurrency']"),
        rate=None if rate is None else (*parse_rate(rate, name=f"{name}['rate']"), rate.strip()),
    )


def parse_pattern(value: Any, *, name: str) -> str:
    """An entry's key: a limit key, or ``prefix:*`` (every key starting ``prefix:``)."""
    try:
        pattern = key(value, name=name, max_length=KEY_LENGTH)
    except InvalidWake as exc:
        raise InvalidLimit(str(exc)) from exc
    stem = pattern[:-1] if pattern.endswith(":*") else pattern
    if "*" in stem or stem == ":":
        raise InvalidLimit(f"{name}: a '*' may only end a 'prefix:*' entry (e.g. 'crm:*'), got {pattern!r:.60}")
    return pattern


@dataclass
class Rules:
    """``WAKES["LIMITS"]`` and ``WAKES["WORKSPACE_LIMIT"]`` as read now: which limits a key or workspace is under."""

    exact: dict[str, Entry] = field(default_factory=dict)
    #: ``(prefix, entry, pattern)``, longest prefix first.
    prefixes: list[tuple[str, Entry, str]] = field(default_factory=list)
    workspace: Entry | Callable[[str], Any] | None = None
    _by_workspace: dict[str, tuple[float, list[Limit]]] = field(default_factory=dict, repr=False)

    @property
    def active(self) -> bool:
        return bool(self.exact or self.prefixes or self.workspace is not None)

    def matching(self, limit_key: str) -> tuple[str, Entry] | None:
        """The entry that governs ``limit_key`` (``(pattern, entry)``): exact, else the longest ``prefix:*``."""
        entry = self.exact.get(limit_key)
        if entry is not None:
            return limit_key, entry
        for prefix, entry, pattern in self.prefixes:
            if limit_key.startswith(prefix):
                return pattern, entry
        return None

    def key_limits(self, limit_key: str | None) -> list[Limit]:
        if limit_key is None:
            return []
        found = self.matching(limit_key)
        return [] if found is None else found[1].limits(LimitScope.KEY, limit_key, found[0])

    def workspace_limits(self, workspace_id: str) -> list[Limit]:
        if self.workspace is None:
            return []
        if isinstance(self.workspace, Entry):
            return self.workspace.limits(LimitScope.WORKSPACE, workspace_id)
        now = time.monotonic()
        known = self._by_workspace.get(workspace_id)
        if known is None or now - known[0] > ASK_EVERY:
            if len(self._by_workspace) >= ASKED_MAX:
                self._by_workspace.clear()
            known = self._by_workspace[workspace_id] = (now, _asked(self.workspace, workspace_id))
        return known[1]

    def of(self, limit_key: str | None, workspace_id: str) -> list[Limit]:
        """Every limit a wake of this key and workspace is under (none: it starts as soon as it is claimed)."""
        return [*self.key_limits(limit_key), *self.workspace_limits(workspace_id)]


def _asked(hook: Callable[[str], Any], workspace_id: str) -> list[Limit]:
    """The limits ``WORKSPACE_LIMIT``'s function gives one workspace; a malformed answer is logged, not enforced."""
    try:
        # In a savepoint: the hook runs inside the claim transaction, and a query of its that fails
        # (a table not migrated yet) would leave PostgreSQL's transaction aborted for the whole pass.
        with transaction.atomic(using=db_alias()):
            answer = hook(workspace_id)
        return (
            [] if answer is None else parse_entry(answer, name="its answer").limits(LimitScope.WORKSPACE, workspace_id)
        )
    except Exception as exc:  # noqa: BLE001 - the host's function: a claim pass must not crash on it
        _once(
            ("workspace", workspace_id, repr(exc)),
            "WAKES['WORKSPACE_LIMIT'] failed for workspace %s (%s: %s): that workspace is not limited",
            workspace_id,
            type(exc).__name__,
            exc,
        )
        return []


_warned: set[Any] = set()


def _once(marker: Any, message: str, *args: Any) -> None:
    """Log an ERROR the first time ``marker`` is seen in this process (a bad setting, not per pass)."""
    if marker in _warned:
        return
    if len(_warned) > 1000:
        _warned.clear()
    _warned.add(marker)
    logger.error(message, *args)


_cache: tuple[str, Rules] | None = None


def current() -> Rules:
    """The rules as the settings say now (parsed once per distinct value; malformed entries left out, logged)."""
    global _cache
    limits = wakes_settings.get("LIMITS")
    workspace = wakes_settings.get("WORKSPACE_LIMIT")
    if not limits and workspace is None:
        return Rules()
    try:
        marker = json.dumps([limits, workspace if not callable(workspace) else id(workspace)], sort_keys=True)
    except (TypeError, ValueError):
        marker = repr((limits, workspace))
    if _cache is not None and _cache[0] == marker:
        return _cache[1]
    rules = _parse(limits, workspace, on_problem=lambda setting, problem: _once((setting, problem), "%s", problem))
    _cache = (marker, rules)
    return rules


def active() -> bool:
    """Whether any limit is configured (what a claim pass asks first: no limits, no cost)."""
    return bool(wakes_settings.get("LIMITS")) or wakes_settings.get("WORKSPACE_LIMIT") is not None


def _parse(limits: Any, workspace: Any, *, on_problem: Callable[[str, str], None]) -> Rules:
    rules = Rules()
    if limits:
        if not isinstance(limits, dict):
            on_problem("LIMITS", f"WAKES['LIMITS'] must be a dict of limit key -> limits, got {type(limits).__name__}")
        else:
            prefixes = []
            for pattern, value in limits.items():
                name = f"WAKES['LIMITS'][{pattern!r:.60}]"
                try:
                    checked = parse_pattern(pattern, name=name)
                    entry = parse_entry(value, name=name)
                except InvalidLimit as exc:
                    on_problem("LIMITS", str(exc))
                    continue
                if checked.endswith(":*"):
                    prefixes.append((checked[:-1], entry, checked))
                else:
                    rules.exact[checked] = entry
            rules.prefixes = sorted(prefixes, key=lambda p: -len(p[0]))
    if workspace is not None:
        if isinstance(workspace, dict):
            try:
                rules.workspace = parse_entry(workspace, name="WAKES['WORKSPACE_LIMIT']")
            except InvalidLimit as exc:
                on_problem("WORKSPACE_LIMIT", str(exc))
        else:
            try:
                hook = workspace if callable(workspace) else import_string(workspace)
                if not callable(hook):
                    raise TypeError(f"{hook!r:.60} is not callable")
                rules.workspace = hook
            except Exception as exc:  # noqa: BLE001 - an ImportError or whatever the module raised
                on_problem(
                    "WORKSPACE_LIMIT",
                    f"WAKES['WORKSPACE_LIMIT'] must be a dict of limits or the dotted path of fn(workspace_id) -> "
                    f"dict | None; {workspace!r:.100} cannot be used ({type(exc).__name__}: {exc!s:.100})",
                )
    return rules


def problems() -> Iterator[tuple[str, str]]:
    """``(setting, message)`` for each malformed part of ``LIMITS`` / ``WORKSPACE_LIMIT``: the system check's errors."""
    found: list[tuple[str, str]] = []
    _parse(
        wakes_settings.get("LIMITS"),
        wakes_settings.get("WORKSPACE_LIMIT"),
        on_problem=lambda setting, problem: found.append((setting, problem)),
    )
    yield from found


def limit_key(value: Any) -> str | None:
    """Check a ``limit_key`` argument: ``None``, or an identifier like a lane (length, storable and printable text:
    :func:`~django_wakes.validation.key`, control and format characters refused).

    A key no ``WAKES["LIMITS"]`` entry matches is allowed: it is simply not limited (a runner at
    ``-v 2`` says so once per key).
    """
    return key(value, name="limit_key", required=False)


__all__ = ["Entry", "Limit", "Rules", "active", "current", "limit_key", "parse_rate", "problems"]
