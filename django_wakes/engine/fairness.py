"""Fair share across workspaces: which workspaces' due wakes a claim pass takes, and how many of each.

Claims take due wakes by ``(-priority, due_at, id)``; alone, that order lets one workspace's backlog
(an import, a campaign) hold every other workspace's wakes back until it has drained. So a runner
that comes back from a *full* pass (it has more work than one batch: the only time order can starve
anyone) learns, cheaply and rarely, which workspaces have due wakes (:func:`_refresh`: a bounded walk
of the distinct workspaces of pending wakes, :data:`WINDOW` at a time from a rotating cursor, then a
capped count of each one's due wakes). While two or more have backlog, each pass's batch is split
between them by weight (``WAKES["WORKSPACE_WEIGHTS"]``) with a deficit kept per workspace, and
claimed with one candidate query per workspace (``workspace_id = %s``, the claim order within it),
joined by ``UNION ALL`` into the claim's one statement on PostgreSQL and the candidate read elsewhere.

Everything else is the claim of today, unchanged: a runner that is keeping up (its passes are not
full), or whose backlog is one workspace's, runs the very statement it ran before (no cost where
fairness is not needed). Lanes keep their guarantees: a candidate is still a lane's head in a free
lane, whatever its workspace, and the unique ``lane_lock`` still decides.

The picker's state lives in the runner's process (one per database, kinds and queues): every runner
is fair on its own, so together they are.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import connections

from ..conf import wakes_settings
from ..models import State, Wake
from .shared import logger

if TYPE_CHECKING:
    from ..querysets import WakeQuerySet
    from .leases import Claim

#: Workspaces one refresh looks at (the rest are looked at by the next refreshes, round the cursor).
WINDOW = 64
#: Workspaces a runner remembers the backlog of (from this and earlier refreshes), at most.
KEPT = 4 * WINDOW
#: Workspaces one pass claims from: bounds the statement (one candidate query each).
PER_PASS = 8
#: A refresh costs at most 1/COST_FACTOR of the time between refreshes ...
COST_FACTOR = 20
#: ... which is at least the first and at most the second (seconds) while passes are full: a
#: workspace whose wakes fall due beside another's backlog is seen within REFRESH_MAX.
REFRESH_MIN, REFRESH_MAX = 0.05, 0.5
#: ... and at least this (seconds) when the last refresh found one workspace's backlog or none.
REFRESH_ALONE = 0.2

#: Compiled into a candidate query in place of its workspace and its LIMIT; bound per pass (:func:`bind`).
_LIMIT_MARK = 987654321


def _workspace_mark(i: int) -> str:
    return f"\x01wakes-fair-workspace-{i}"


@dataclass(frozen=True)
class _Count:
    """Where a pass's share of workspace ``i`` goes in a compiled statement's parameters."""

    i: int


@dataclass(frozen=True)
class Share:
    """How many due wakes of one workspace a pass asks for."""

    workspace_id: str
    count: int


@dataclass
class _Backlog:
    """What a runner knows of one workspace's due wakes: how many (at most the cap it counted to)."""

    count: int
    exact: bool  # fewer than the cap were due when counted: when claimed down to 0, it is drained


@dataclass
class _Picker:
    cursor: str = ""
    backlog: dict[str, _Backlog] = field(default_factory=dict)
    credit: dict[str, float] = field(default_factory=dict)
    refreshed: float = float("-inf")
    cost: float = 0.0
    full: bool = False

    def refresh_due(self) -> bool:
        # Alone (one workspace's backlog, the common case) a newcomer is looked for less often.
        least = REFRESH_MIN if sum(1 for known in self.backlog.values() if known.count > 0) > 1 else REFRESH_ALONE
        interval = min(max(COST_FACTOR * self.cost, least), REFRESH_MAX)
        return time.monotonic() - self.refreshed >= interval


_pickers: dict[tuple[Any, ...], _Picker] = {}
_lock = threading.Lock()


def reset() -> None:
    """Forget what this process knows of every workspace's backlog (tests; a new runner starts so)."""
    with _lock:
        _pickers.clear()


def _key(using: str, kinds: Sequence[str], queues: Sequence[str] | None) -> tuple[Any, ...]:
    return (using, tuple(kinds), None if queues is None else tuple(queues))


def plan(
    using: str,
    now: datetime,
    kinds: Sequence[str],
    limit: int,
    lanes: Sequence[str] | None,
    queues: Sequence[str] | None,
) -> list[Share] | None:
    """The shares of this pass's ``limit``, or ``None``: claim as always (order alone is fair enough).

    ``None`` unless the last pass came back full, at least two workspaces are known to have due wakes
    and one of them has at least half a batch of them. A runner confined to ``--lanes`` is never split
    (its lanes are its work).
    """
    if lanes or limit < 2:
        return None
    with _lock:
        picker = _pickers.get(_key(using, kinds, queues))
        if picker is None or not picker.full:
            return None
        if picker.refresh_due():
            _refresh(picker, using, now, kinds, queues, limit)
        active = [w for w, known in picker.backlog.items() if known.count > 0]
        if len(active) < 2 or 2 * max(picker.backlog[w].count for w in active) < limit:
            # Nobody's backlog could take half a batch: the plain order holds no one back for long
            # (10,000 workspaces with a few due wakes each), and it is one statement.
            return None
        return _allocate(picker, active, limit)


def _allocate(picker: _Picker, active: list[str], limit: int) -> list[Share]:
    """Split ``limit`` by weight: a deficit per workspace, the :data:`PER_PASS` most owed served first.

    Each active workspace is owed ``limit × its weight ÷ the active weights`` per pass; a pass gives
    the most-owed workspaces what they are owed (capped by their backlog) and charges it. What they
    cannot use goes to those that still have backlog uncharged, so a pass stays full while there is
    work (a workspace is never charged for work nobody else wanted).
    """
    weigh = weights()
    weight = {w: weigh(w) for w in active}
    total = sum(weight.values())
    for gone in set(picker.credit) - set(active):
        del picker.credit[gone]  # a drained workspace starts again from nothing
    for w in active:
        picker.credit[w] = min(picker.credit.get(w, 0.0) + limit * weight[w] / total, float(limit))
    chosen = sorted(active, key=lambda w: (-picker.credit[w], w))[: min(PER_PASS, limit)]
    shares: dict[str, int] = {}
    for w in chosen:
        fair = min(picker.backlog[w].count, max(1, math.floor(picker.credit[w])))
        shares[w] = fair
        picker.credit[w] -= fair
    room = limit - sum(shares.values())
    for w in chosen:
        if room <= 0:
            break
        extra = min(room, picker.backlog[w].count - shares[w])
        if extra > 0:
            shares[w] += extra
            room -= extra
    return [Share(w, n) for w, n in shares.items() if n > 0]


def weights() -> Callable[[str], float]:
    """``weight(workspace_id)`` from ``WAKES["WORKSPACE_WEIGHTS"]`` (1 for a workspace it does not name).

    A weight that is not a positive finite number (a callable's answer; the check covers a dict) is
    taken as 1 and logged: a runner never stops over it.
    """
    source = wakes_settings.workspace_weights

    def weight(workspace_id: str) -> float:
        try:
            value = source(workspace_id)
        except Exception:  # noqa: BLE001 - the host's function: its failure must not stop claims
            logger.exception("WORKSPACE_WEIGHTS failed for workspace %r; weighing it 1", workspace_id)
            return 1.0
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            logger.warning("WORKSPACE_WEIGHTS gave %r for workspace %r; weighing it 1", value, workspace_id)
            return 1.0
        return float(value)

    return weight


def after_pass(
    using: str,
    kinds: Sequence[str],
    queues: Sequence[str] | None,
    limit: int,
    shares: list[Share] | None,
    claims: list[Claim],
    top_up: Callable[[int], list[Claim]],
) -> list[Claim]:
    """Note what a pass claimed (whether it was full, what each workspace gave); return its claims in firing order.

    A split pass that came back short (a workspace had fewer claimable wakes than counted: lanes,
    another runner) is topped up at once with the plain claim, so it stays full while there is
    work. Its claims are interleaved (each workspace's in claim order, spread over the batch), so a
    workspace with a few wakes does not wait behind another's many within the batch either.
    """
    if shares is not None:
        claims = _interleave(claims)
        _count_down(using, kinds, queues, shares, claims)
        if len(claims) < limit:
            claims += top_up(limit - len(claims))
    key = _key(using, kinds, queues)
    with _lock:
        picker = _pickers.get(key)
        if picker is None:
            picker = _pickers[key] = _Picker()
        picker.full = len(claims) >= limit
    return claims


def _count_down(
    using: str, kinds: Sequence[str], queues: Sequence[str] | None, shares: list[Share], claims: list[Claim]
) -> None:
    got: dict[str, int] = {}
    for claim in claims:
        got[claim.wake.workspace_id] = got.get(claim.wake.workspace_id, 0) + 1
    with _lock:
        picker = _pickers.get(_key(using, kinds, queues))
        if picker is None:
            return
        for share in shares:
            known = picker.backlog.get(share.workspace_id)
            if known is None:
                continue
            taken = got.get(share.workspace_id, 0)
            if taken < share.count:
                known.count = 0  # drained, or the rest is behind busy lanes: the next refresh says
            elif known.exact:
                known.count -= taken
            # else: it had at least the cap when counted, and gave all it was asked: keep asking


def _interleave(claims: list[Claim]) -> list[Claim]:
    """Each workspace's claims in claim order, the workspaces in turn: one of each, then the next of each."""
    rank: dict[str, int] = {}
    keyed: list[tuple[int, int, Claim]] = []
    for claim in sorted(claims, key=lambda c: (-c.wake.priority, c.wake.due_at or c.started_at, c.wake.pk)):
        n = rank.get(claim.wake.workspace_id, 0)
        rank[claim.wake.workspace_id] = n + 1
        keyed.append((n, len(keyed), claim))
    keyed.sort(key=lambda item: item[:2])
    return [claim for _, _, claim in keyed]


# -- which workspaces have due wakes ----------------------------------------------------------------


def _refresh(
    picker: _Picker, using: str, now: datetime, kinds: Sequence[str], queues: Sequence[str] | None, cap: int
) -> None:
    """Look at the next :data:`WINDOW` workspaces with pending wakes (round the cursor) and count their due ones."""
    started = time.monotonic()
    found = _walk(using, picker.cursor, WINDOW)
    if len(found) < WINDOW and picker.cursor:
        found += [w for w in _walk(using, "", WINDOW - len(found)) if w <= picker.cursor and w not in found]
    picker.cursor = found[-1] if len(found) >= WINDOW else ""
    counts = _due_counts(using, now, kinds, queues, found, cap) if len(found) > 1 else {}
    backlog = {w: _Backlog(n, exact=n < cap) for w, n in counts.items() if n > 0}
    # Workspaces outside this window keep what was known of them until the cursor comes round again.
    for w, known in picker.backlog.items():
        if w not in found and known.count > 0:
            backlog.setdefault(w, known)
    if len(backlog) > KEPT:  # bounded: the most backlogged; the others are seen again round the cursor
        backlog = dict(sorted(backlog.items(), key=lambda item: -item[1].count)[:KEPT])
    picker.backlog = backlog
    picker.refreshed = time.monotonic()
    picker.cost = picker.refreshed - started


def _walk(using: str, after: str, limit: int) -> list[str]:
    """The first ``limit`` distinct workspaces of pending wakes after ``after``, in order, from the index.

    One probe of ``wake_pending_workspace_idx`` per workspace: on PostgreSQL and SQLite a recursive
    loose index scan in one statement; MySQL/MariaDB read neither that nor ``GROUP BY`` as a loose
    scan (they read every pending row), so there it is one ``LIMIT 1`` probe per workspace.
    """
    connection = connections[using]
    table = connection.ops.quote_name(Wake._meta.db_table)
    pending = f"FROM {table} WHERE state = %s AND priority IS NOT NULL AND workspace_id >"
    found: list[str] = []
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            probe = f"SELECT workspace_id {pending} %s ORDER BY state, workspace_id LIMIT 1"  # noqa: S608
            while len(found) < limit:
                cursor.execute(probe, [State.PENDING, found[-1] if found else after])
                row = cursor.fetchone()
                if row is None:
                    break
                found.append(row[0])
            return found
        cursor.execute(
            f"WITH RECURSIVE ws(w, n) AS (SELECT (SELECT MIN(workspace_id) {pending} %s), 1"  # noqa: S608
            f" UNION ALL SELECT (SELECT MIN(workspace_id) {pending} ws.w), ws.n + 1"
            " FROM ws WHERE ws.w IS NOT NULL AND ws.n < %s) SELECT w FROM ws WHERE w IS NOT NULL",
            [State.PENDING, after, State.PENDING, limit],
        )
        return [row[0] for row in cursor.fetchall()]


#: A time no wake is due at, compiled into the count query in place of "now".
_NOW_MARK = datetime(1970, 1, 3, 4, 5, 6, 789012, tzinfo=UTC)
_count_parts: dict[tuple[Any, ...], tuple[str, tuple[Any, ...]]] = {}


def _due_counts(
    using: str, now: datetime, kinds: Sequence[str], queues: Sequence[str] | None, workspaces: list[str], cap: int
) -> dict[str, int]:
    """How many due wakes of registered kinds each workspace has, counted up to ``cap``: one statement.

    One workspace's count is compiled once (per database, kinds, queues and cap) and repeated, the
    workspace and the time bound per refresh: compiling 64 querysets would cost more than running them.
    """
    key = (using, tuple(kinds), None if queues is None else tuple(queues), cap, settings.USE_TZ)
    part = _count_parts.get(key)
    if part is None:
        due = Wake.objects.db_manager(using).due(_NOW_MARK).filter(priority__isnull=False)
        due = due.filter(workspace_id=_workspace_mark(0)).of_kinds(kinds).in_queues(queues)
        part = due.values_list("id")[:cap].query.sql_with_params()
        if len(_count_parts) >= 64:
            _count_parts.clear()
        _count_parts[key] = part
    sql, part_params = part
    connection = connections[using]
    due_at = Wake._meta.get_field("due_at")  # the time as the backend was handed it (a string on SQLite)
    mark, bound_now = (due_at.get_db_prep_value(t, connection) for t in (_NOW_MARK, now))
    parts: list[str] = []
    params: list[Any] = []
    for i, workspace in enumerate(workspaces):
        parts.append(f"SELECT {i} AS i, COUNT(*) AS n FROM ({sql}) AS due{i}")  # noqa: S608 - ORM SQL, an int
        bound = {mark: bound_now, _workspace_mark(0): workspace}
        params += [bound.get(v, v) if isinstance(v, str | datetime) else v for v in part_params]
    with connection.cursor() as cursor:
        cursor.execute(" UNION ALL ".join(parts), params)
        return {workspaces[i]: n for i, n in cursor.fetchall()}


# -- the candidates of a split pass -----------------------------------------------------------------


def candidates_sql(
    due: WakeQuerySet, shares: int, finish: Callable[[WakeQuerySet], Any], suffix: str = ""
) -> tuple[str, tuple[Any, ...]]:
    """Compile the candidates of ``shares`` workspaces: one ``due`` query per workspace, ``UNION ALL``.

    ``finish`` turns a workspace's candidates into the rows wanted (``values_list``, an annotation),
    ``suffix`` is appended to each (``FOR UPDATE … SKIP LOCKED``). Each workspace's id and count are
    placeholders to :func:`bind` per pass, so the SQL is compiled once per number of shares.
    """
    parts: list[str] = []
    params: list[Any] = []
    for i in range(shares):
        query = finish(due.filter(workspace_id=_workspace_mark(i))[:_LIMIT_MARK]).query
        sql, part_params = query.sql_with_params()
        if sql.count(f"LIMIT {_LIMIT_MARK}") != 1:
            raise RuntimeError("a workspace's claim candidates did not compile with their LIMIT")
        sql = sql.replace(f"LIMIT {_LIMIT_MARK}", "LIMIT %s") + suffix
        parts.append(f"SELECT * FROM ({sql}) AS fair{i}")  # noqa: S608 - the ORM's own SQL
        params += [*part_params, _Count(i)]
    return " UNION ALL ".join(parts), tuple(params)


def bind(params: Sequence[Any], shares: list[Share] | None) -> list[Any]:
    """Put this pass's workspaces and counts in a statement compiled by :func:`candidates_sql`."""
    if not shares:
        return list(params)
    marks = {_workspace_mark(i): share.workspace_id for i, share in enumerate(shares)}
    return [
        shares[value.i].count
        if isinstance(value, _Count)
        else marks.get(value, value)
        if isinstance(value, str)
        else value
        for value in params
    ]


def due_ids(using: str, due: WakeQuerySet, room: int, shares: list[Share] | None) -> list[int]:
    """The ids of due candidates to lock: the claim's read (``shares`` ``None``), or each workspace's share."""
    if not shares:
        return list(due.values_list("id", flat=True)[:room])
    sql, params = candidates_sql(due, len(shares), lambda q: q.values_list("id"))
    with connections[using].cursor() as cursor:
        cursor.execute(sql, bind(params, shares))
        return [row[0] for row in cursor.fetchall()][:room]


def bad_weights(weights: dict[Any, Any]) -> str | None:
    """What is wrong with a ``WORKSPACE_WEIGHTS`` dict (system check E022), or None: ids are strings, weights > 0."""
    bad = [
        (key, weight)
        for key, weight in weights.items()
        if not isinstance(key, str)
        or isinstance(weight, bool)
        or not isinstance(weight, int | float)
        or not math.isfinite(weight)
        or weight <= 0
    ]
    return ", ".join(f"{key!r}: {weight!r}" for key, weight in bad[:5])[:300] if bad else None
