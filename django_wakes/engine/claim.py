"""Claiming: take due wakes (and lapsed leases) for one runner in one claim pass.

A claim moves a wake from ``pending`` to ``firing`` with a lease, a fresh fencing token and the
result its sink will be handed (persisted here, before any sink runs). The candidates are due wakes
of registered kinds at the head of free lanes (``WakeQuerySet.claimable``). On PostgreSQL one
statement locks them ``SKIP LOCKED`` and claims them (``UPDATE … RETURNING``): one round trip, what
a push-woken runner pays before its sink starts. Elsewhere (and for the few wakes whose result is
decided in Python) they are read without locks, locked with SKIP LOCKED and moved by one
conditional UPDATE per result shape. The unique ``lane_lock`` column is what makes a lane
single-file: a racing claim of a busy lane fails its unique check and is dropped.

A claim and its lease are :mod:`.leases`, taking over lapsed leases :mod:`.takeover`, deciding and
updating the locked rows :mod:`.claim_rows`; this module re-exports their public names.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from django.conf import settings
from django.db import IntegrityError, OperationalError, connections, transaction
from django.db.models import BooleanField, ExpressionWrapper, Q

from .. import clock, tracing
from ..conf import wakes_settings
from ..models import Fence, State, TriggerType, Wake
from ..querysets import WakeQuerySet
from ..sinks import registry
from . import fairness, limit_rules, limit_slots
from .claim_rows import _claim_rows
from .leases import Claim, next_fence, renew_leases
from .shared import db_alias, logger, new_claim_token
from .takeover import _take_over_lapsed, take_over_lapsed

__all__ = ["Claim", "claim_batch", "next_fence", "renew_leases", "take_over_lapsed"]


def claim_batch(
    *,
    runner_id: str,
    limit: int | None = None,
    lanes: list[str] | None = None,
    lease: timedelta | None = None,
    queues: list[str] | None = None,
    raise_rolled_back: bool = False,
) -> list[Claim]:
    """Claim up to ``limit`` wakes for ``runner_id``: lapsed leases first, then due pending wakes.

    ``lanes`` and ``queues`` narrow what is claimed (``None``: everything).

    On PostgreSQL the common pass is one statement (:func:`_claim_in_one_statement`); elsewhere, and
    whenever that statement leaves work for Python, it is :func:`_claim_in_steps`. A deadlock or lock
    timeout between racing runners rolls the pass back: nothing is claimed and the caller simply runs
    its next pass; with ``raise_rolled_back`` the error is raised instead, for a caller that has no
    next pass (``runwakes --once``) to try again or to fail.

    While tracing (:mod:`django_wakes.tracing`) each claim starts its ``wakes.fire`` span here.
    """
    claim = partial(
        _claim_batch,
        runner_id=runner_id,
        limit=limit,
        lanes=lanes,
        lease=lease,
        queues=queues,
        raise_rolled_back=raise_rolled_back,
    )
    if not tracing.enabled():
        claims = claim()
    else:
        started = tracing.now_ns()
        claims = claim()
        tracing.claimed(claims, started, tracing.now_ns())
    limit_slots.note_unlimited(claims)
    return claims


def _claim_batch(
    *,
    runner_id: str,
    limit: int | None,
    lanes: list[str] | None,
    lease: timedelta | None,
    queues: list[str] | None,
    raise_rolled_back: bool = False,
) -> list[Claim]:
    limit = limit or wakes_settings.batch
    now = clock.now()
    kinds = registry.kinds()
    if not kinds:
        return []
    using = db_alias()
    try:
        one_pass = partial(_claim_pass, using, now, kinds, runner_id=runner_id, lanes=lanes, lease=lease, queues=queues)
        shares = fairness.plan(using, now, kinds, limit, lanes, queues)  # None: one workspace's backlog at most
        claims = one_pass(limit, shares=shares)
        return fairness.after_pass(using, kinds, queues, limit, shares, claims, top_up=one_pass)
    except OperationalError as exc:
        if raise_rolled_back:
            raise
        logger.info("claim pass rolled back, will retry: %s", exc)
        return []


def _claim_pass(
    using: str, now: datetime, kinds: list[str], limit: int, *, shares: list[fairness.Share] | None = None, **kw: Any
) -> list[Claim]:
    """One claim pass; ``shares``: split between workspaces (:mod:`~django_wakes.engine.fairness`).

    With limits configured every pass is claimed in steps: admitting a wake takes its limits' slots.
    """
    if connections[using].vendor in ONE_STATEMENT_VENDORS and not limit_rules.active():
        try:
            one = _claim_in_one_statement(using, now, kinds, limit, shares=shares, **kw)
        except IntegrityError:
            # A lane was taken under the statement (the unique lane_lock refused it), so nothing
            # of it was written: claim the two-step way, which skips busy lanes one by one.
            logger.debug("one-statement claim met a busy lane; claiming in steps")
            one = None
        if one is not None:
            return one
    return _claim_in_steps(using, now, kinds, limit, shares=shares, **kw)


#: Database vendors whose claim pass is one ``UPDATE … RETURNING`` statement over ``SELECT … FOR
#: UPDATE SKIP LOCKED`` candidates (:func:`_claim_in_one_statement`); the others read the
#: candidates, lock them and update them in a transaction of several statements (:func:`_claim_in_steps`).
ONE_STATEMENT_VENDORS = frozenset({"postgresql"})


def _due_candidates(
    using: str, now: datetime, kinds: list[str], lanes: list[str] | None, queues: list[str] | None
) -> WakeQuerySet:
    candidates = Wake.objects.db_manager(using).claimable(now, kinds, queues)
    return candidates.filter(serial_key__in=lanes) if lanes else candidates


def _claim_in_steps(
    using: str,
    now: datetime,
    kinds: list[str],
    limit: int,
    runner_id: str,
    lanes: list[str] | None,
    lease: timedelta | None,
    queues: list[str] | None,
    undecided: list[int] | None = None,
    shares: list[fairness.Share] | None = None,
) -> list[Claim]:
    """One claim transaction: lapsed leases first, then due wakes up to ``limit``.

    The candidates are read without locks, then locked ``SKIP LOCKED`` (re-checked to be pending)
    and claimed by :func:`_claim_rows`. ``undecided``: the ids of due wakes to claim instead of a
    candidate read (those the one-statement claim left to Python). ``shares``: see :mod:`.fairness`.
    """
    manager = Wake.objects.db_manager(using)
    with transaction.atomic(using=using):
        claims = _take_over_lapsed(using, now, kinds, limit, runner_id, lease, queues)
        room = limit - len(claims)
        if room <= 0:
            return claims
        if undecided is not None:
            return claims + _claim_rows(using, list(manager.lock_pending(undecided[:room], now)), now, runner_id, lease)
        candidates = limit_slots.without_held(_due_candidates(using, now, kinds, lanes, queues), using, now)
        ids = fairness.due_ids(using, candidates, room, shares)
        if not ids:
            return claims
        short: set[limit_slots.Bucket] = set()  # the limits some of these wakes found no slot of
        claims.extend(_claim_rows(using, list(manager.lock_pending(ids, now)), now, runner_id, lease, short))
        if short and len(claims) < limit:  # once more, past them: their backlog must not crowd others out
            ids = fairness.due_ids(using, limit_slots.past_short(candidates, short, ids), limit - len(claims), shares)
            claims.extend(_claim_rows(using, list(manager.lock_pending(ids, now)), now, runner_id, lease))
        return claims


#: The result a plain due wake is claimed with (what :func:`_claim_result` decides for it).
_PLAIN_RESULT = {"trigger": TriggerType.AT.value}


def _claim_in_one_statement(
    using: str,
    now: datetime,
    kinds: list[str],
    limit: int,
    runner_id: str,
    lanes: list[str] | None,
    lease: timedelta | None,
    queues: list[str] | None,
    shares: list[fairness.Share] | None = None,
) -> list[Claim] | None:
    """The claim pass in one round trip (PostgreSQL): what a push-woken runner pays before its sink.

    One statement, committed on its own (autocommit), locks the due candidates (``FOR UPDATE SKIP
    LOCKED``: the very query of the two-step path; PostgreSQL re-checks it on every row it locks)
    and moves the *plain* ones to ``firing`` with ``UPDATE … RETURNING`` every column (they stay locked
    from the moment PostgreSQL found them still pending, so the UPDATE joins them by primary key
    alone, a plan no statistics can change): each gets the claim token, the lease, the unique
    ``lane_lock``, and a fencing token drawn from the fence sequence *after* its row was locked (so it
    is larger than any earlier claim's of the wake or its lane). It claims nothing when a lease has
    lapsed: then the whole pass is :func:`_claim_in_steps` (lapsed leases first), and ``None`` is
    returned to say so.

    A due wake whose result needs deciding in Python (a recurring occurrence's catch-up plan, an
    expiry, an approval's default answer) is left pending and claimed right after through
    :func:`_claim_in_steps`, as on every other database. A ``lane_lock`` conflict raises IntegrityError
    and writes nothing.
    """
    connection = connections[using]
    queue_names = None if queues is None else tuple(queues)
    statement = _one_statement(using, tuple(kinds), limit, tuple(lanes or ()), queue_names, len(shares or ()))
    token = new_claim_token()
    lease_until = now + (lease or wakes_settings.lease)
    params = [now if _is_now(value) else value for value in fairness.bind(statement.params, shares)]
    params += [State.FIRING, token, lease_until, runner_id, now, Fence._meta.db_table, now, json.dumps(_PLAIN_RESULT)]
    rows = _run_without_jit(connection, using, statement.sql, params)
    if any(row[0] == "lapsed" for row in rows):
        return None
    claims: list[Claim] = []
    undecided: list[int] = []
    converters, names = statement.converters, statement.names
    for row in rows:
        if row[0] == "undecided":
            undecided.append(row[1])
            continue
        values = [convert(value) for convert, value in zip(converters, row[1:], strict=True)]
        wake = Wake.from_db(using, names, values)
        claims.append(Claim(wake, token, runner_id, now, expired=bool((wake.result or {}).get("expired"))))
    if undecided:
        claims.extend(_claim_in_steps(using, now, kinds, len(undecided), runner_id, lanes, lease, queues, undecided))
        claims.sort(key=lambda c: (-c.wake.priority, c.wake.due_at or now, c.wake.pk))
    return claims


def _run_without_jit(connection: Any, using: str, sql: str, params: list[Any]) -> list[tuple[Any, ...]]:
    """Run the claim statement as its own transaction with PostgreSQL's JIT off; return its rows.

    With a backlog of due wakes the planner's cost estimate of the claim (a probe per candidate)
    crosses ``jit_above_cost``, and JIT-compiling it takes hundreds of milliseconds for a statement
    that runs in one or two. ``SET LOCAL`` keeps the setting to this transaction. With Django's
    client-side parameter binding (its default for psycopg 3) ``BEGIN; SET LOCAL …; statement;
    COMMIT`` goes out as one query string, one round trip; with ``server_side_binding`` it is a
    transaction of separate statements. Inside a caller's transaction (tests, ``run_due()`` in an
    ``atomic()``) it runs in a savepoint, JIT as configured, so a refused lane leaves that
    transaction usable.
    """
    if connection.in_atomic_block:
        with transaction.atomic(using=using), connection.cursor() as cursor:
            cursor.execute(sql, params)
            return list(cursor.fetchall())
    if connection.settings_dict.get("OPTIONS", {}).get("server_side_binding"):
        with transaction.atomic(using=using), connection.cursor() as cursor:
            cursor.execute("SET LOCAL jit = off")
            cursor.execute(sql, params)
            return list(cursor.fetchall())
    with connection.cursor() as cursor:
        try:
            cursor.execute(f"BEGIN; SET LOCAL jit = off; {sql}; COMMIT", params)
            raw = cursor.cursor
            while raw.description is None:  # BEGIN and SET return no rows
                if not raw.nextset():
                    raise RuntimeError("the claim statement returned no result")
            rows = list(cursor.fetchall())
            while raw.nextset():  # COMMIT
                pass
            return rows
        except BaseException:
            try:
                cursor.execute("ROLLBACK")  # a failed statement leaves its transaction open and aborted
            except Exception:  # noqa: BLE001 - a broken connection: the original error says why
                logger.debug("ROLLBACK after a failed claim statement failed too", exc_info=True)
            raise


#: Claim statements are compiled with this in place of "now"; each pass puts its own now there.
_NOW = datetime(1970, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)


def _is_now(value: Any) -> bool:
    return isinstance(value, datetime) and value == _NOW


@dataclass(frozen=True)
class _Statement:
    """A compiled one-statement claim: its SQL, its parameters up to the UPDATE's, how to read its rows."""

    sql: str
    params: tuple[Any, ...]
    names: list[str]
    converters: list[Callable[[Any], Any]]


_statements: dict[tuple[Any, ...], _Statement] = {}
#: The line breaks and indentation of the claim statement's template (the ORM's SQL has no line breaks).
_LAYOUT = re.compile(r"\n\s*")


def _one_statement(
    using: str,
    kinds: tuple[str, ...],
    limit: int,
    lanes: tuple[str, ...],
    queues: tuple[str, ...] | None,
    shares: int = 0,
) -> _Statement:
    """Compile (once per database, kinds, limit, lanes and queues) the statement of :func:`_claim_in_one_statement`.

    Compiling the claim query through the ORM costs more than running it; the SQL does not change
    between passes, only the time does. The same SQL text also lets psycopg prepare it on the server.
    """
    key = (using, kinds, limit, lanes, queues, shares, settings.USE_TZ)  # USE_TZ: the columns' converters follow it
    found = _statements.get(key)
    if found is not None:
        return found
    connection = connections[using]
    qn = connection.ops.quote_name
    table = qn(Wake._meta.db_table)
    # Plain: the result is kept (an event, an answer or an earlier claim delivered it) or is
    # {"trigger": "at"} (not recurring, not expired).
    plain = ExpressionWrapper(
        Q(result__isnull=False)
        | (Q(cron="") & Q(every__isnull=True) & (Q(expires_at__isnull=True) | Q(expires_at__gt=_NOW))),
        output_field=BooleanField(),
    )
    due = _due_candidates(using, _NOW, list(kinds), list(lanes) or None, None if queues is None else list(queues))
    lapsed = Wake.objects.db_manager(using).in_queues(queues).lapsed(_NOW).of_kinds(kinds).values_list("id")[:1]
    # Locked as lock_pending() locks (Django compiles select_for_update() only inside atomic(); the
    # statement is its own transaction, and its row locks last until it commits).
    lock = f" FOR UPDATE OF {table} SKIP LOCKED"
    if shares:  # one candidate query per workspace (engine.fairness), placeholders bound per pass
        cand_sql, cand_params = fairness.candidates_sql(
            due, shares, lambda q: q.annotate(plain=plain).values_list("id", "plain"), lock
        )
    else:
        cand_sql, cand_params = due[:limit].annotate(plain=plain).values_list("id", "plain").query.sql_with_params()
        cand_sql += lock
    lapsed_sql, lapsed_params = lapsed.query.sql_with_params()
    fields = sorted(Wake._meta.concrete_fields, key=lambda f: not f.primary_key)  # the id first
    columns = [qn(str(f.column)) for f in fields]
    nulls = ",NULL" * (len(fields) - 1)
    # Only quoted names and the ORM's own compiled SQL are interpolated; every value is a parameter.
    # Kept short (no indentation, the claimed rows' columns named once): psycopg caches its parsing of
    # a statement of up to 4 KiB and 50 parameters; a longer one is split by a regex on every claim
    # (measured 0.3-2 ms, the whole claim's execution time again).
    template = f"""
        WITH lapsed AS ({lapsed_sql}),
        cand AS ({cand_sql}),
        claimed AS (
            UPDATE {table} AS w SET
                state = %s, lane_lock = w.serial_key, claim_token = %s, lease_until = %s, claimed_by = %s,
                claimed_at = %s, attempts = w.attempts + 1, coalesce_key = NULL,
                fence = nextval(pg_get_serial_sequence(%s, 'id')), sink_started_at = NULL, updated_at = %s,
                result = COALESCE(w.result, %s::jsonb)
            FROM cand
            WHERE w.id = cand.id AND cand.plain AND NOT EXISTS (SELECT 1 FROM lapsed)
            RETURNING {",".join(f"w.{column}" for column in columns)}
        )
        SELECT 'claimed', claimed.* FROM claimed
        UNION ALL SELECT 'undecided', id{nulls} FROM cand WHERE NOT cand.plain
        UNION ALL SELECT 'lapsed', id{nulls} FROM lapsed
    """  # noqa: S608
    sql = _LAYOUT.sub(" ", template).strip()
    params = (*lapsed_params, *cand_params)
    if sum(1 for value in params if _is_now(value)) != 1 + 2 * max(shares, 1):  # the lease, the due time and the expiry
        raise RuntimeError("the claim statement did not compile with its three 'now' parameters")
    statement = _Statement(
        sql=sql,
        params=params,
        names=[f.attname for f in fields],
        converters=_row_converters(connection, fields),
    )
    if len(_statements) >= 64:  # kinds, limits, lanes and queues come from a few runner configurations
        _statements.clear()
    _statements[key] = statement
    return statement


def _row_converters(connection: Any, fields: list[Any]) -> list[Callable[[Any], Any]]:
    """Per column, what the ORM would do to a fetched value (e.g. decode a JSON column)."""

    def chain(field: Any) -> Callable[[Any], Any]:
        expression = field.get_col(Wake._meta.db_table)
        steps = connection.ops.get_db_converters(expression) + field.get_db_converters(connection)
        if not steps:
            return lambda value: value

        def convert(value: Any) -> Any:
            for step in steps:
                value = step(value, expression, connection)
            return value

        return convert

    return [chain(field) for field in fields]
