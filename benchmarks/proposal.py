"""A prototype of *batched settle*, measured against the shipped loop (an A/B, not the product).

The shipped engine settles every fired wake in its own transaction (BEGIN, fenced UPDATE,
INSERT attempt, COMMIT: four round trips and two ORM compilations per wake). This prototype
runs the sinks of one claimed batch, then settles all the plain successes of the batch in ONE
transaction: lock the rows still held under the batch's fence token, one UPDATE, one bulk INSERT
of attempts. Anything else (Retry/Defer/Stop, a raising sink, an expired or recurring wake, a
takeover) goes through the engine's own per-wake settle, unchanged.

It is here to quantify the proposal in docs/performance.md; django_wakes does not use it.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db import transaction

from django_wakes import clock, engine
from django_wakes.models import Outcome, State, Wake, WakeAttempt
from django_wakes.sinks import Defer, Retry, Stop, registry

logger = logging.getLogger("django_wakes")


def run_once_batched(*, runner_id: str, limit: int) -> int:
    """One pass: claim a batch, run every sink, settle the plain successes together; return fired."""
    claims = engine.claim_batch(runner_id=runner_id, limit=limit)
    plain: list[engine.Claim] = []
    fired = 0
    for claim in claims:
        wake = claim.wake
        sink_fn = registry.get(wake.kind)
        if sink_fn is None or claim.expired or claim.takeover or wake.is_recurring:
            fired += engine.fire(claim).outcome in ("fired", "expired", "stopped")
            continue
        try:
            returned = sink_fn(wake, dict(claim.result))
        except Exception as exc:  # noqa: BLE001 - the engine's failure path, per wake
            error = engine._format_error(exc)
            engine._settle_retrying(f"wake {claim.wake.pk}", lambda c=claim, e=error: engine._settle_failure(c, e))
            continue
        if isinstance(returned, Retry | Defer | Stop):
            out = engine._settle_retrying(
                f"wake {claim.wake.pk}", lambda c=claim, r=returned: engine._settle_returned(c, r)
            )
            fired += out.outcome in ("fired", "stopped")
            continue
        plain.append(claim)
    fired += settle_batch(plain)
    return fired


def settle_batch(claims: list[engine.Claim]) -> int:
    """Settle plain successes in one transaction, fenced per row by the claim token; return how many won."""
    if not claims:
        return 0
    using = engine.db_alias()
    now = clock.now()
    by_token: dict[str, list[engine.Claim]] = {}
    for claim in claims:
        by_token.setdefault(claim.token, []).append(claim)
    won_total = 0
    with transaction.atomic(using=using):
        for token, group in by_token.items():
            ids = [c.wake.pk for c in group]
            rows = Wake.objects.using(using).filter(pk__in=ids, state=State.FIRING, claim_token=token)
            won = set(rows.select_for_update().values_list("pk", flat=True))
            if not won:
                continue
            Wake.objects.using(using).filter(pk__in=won).update(
                state=State.FIRED, lane_lock=None, lease_until=None, claim_token=None, last_error="", fired_at=now,
                updated_at=now,
            )
            WakeAttempt.objects.using(using).bulk_create(
                WakeAttempt(
                    wake_id=c.wake.pk, number=c.wake.attempts, runner_id=c.runner_id, started_at=c.started_at,
                    finished_at=now, outcome=Outcome.FIRED,
                )
                for c in group
                if c.wake.pk in won
            )
            won_total += len(won)
    for claim in claims:
        logger.info(
            "fired wake=%s kind=%s lane=%s outcome=%s (batched settle)",
            claim.wake.pk, claim.wake.kind, claim.wake.serial_key, Outcome.FIRED,
        )
    return won_total


def drain(n: int, *, batched: bool, limit: int = 100) -> float:
    """Fire ``n`` due wakes with pass after pass in this process; return wakes/s."""
    from django_wakes.runner import Runner

    runner = Runner(interval=1.0, listen=False, gc_every=None)
    fired = 0
    t0 = time.perf_counter()
    while fired < n:
        if batched:
            got = run_once_batched(runner_id=runner.runner_id, limit=limit)
            engine.next_due_at()  # what the shipped pass also does, to compare like with like
        else:
            before = runner.fired
            runner.run_once()
            got = runner.fired - before
        if not got:
            raise RuntimeError(f"nothing fired after {fired}/{n}")
        fired += got
    return n / (time.perf_counter() - t0)


def step_ab(args: Any) -> dict[str, Any]:
    """Shipped per-wake settle vs the batched-settle prototype, same process, same database."""
    from benchmarks.jobs import reset, seed

    out: dict[str, Any] = {"n": args.n}
    for label, batched in (("shipped", False), ("batched", True), ("shipped_again", False), ("batched_again", True)):
        reset()
        seed(args.n, lanes=args.lanes)
        out[label] = drain(args.n, batched=batched)
    out["shipped_best"] = max(out["shipped"], out["shipped_again"])
    out["batched_best"] = max(out["batched"], out["batched_again"])
    return out


LEAN_CLAIM_SQL = """
UPDATE django_wakes_wake AS w
SET state = 'firing', lane_lock = w.serial_key, claim_token = %(token)s, lease_until = %(lease_until)s,
    claimed_by = %(runner)s, claimed_at = %(now)s, attempts = w.attempts + 1, coalesce_key = NULL,
    updated_at = %(now)s, result = COALESCE(w.result, '{"trigger": "at"}'::jsonb)
WHERE w.id IN (
    SELECT c.id FROM django_wakes_wake AS c
    WHERE c.state = 'pending' AND c.due_at <= %(now)s AND c.kind = ANY(%(kinds)s)
      AND c.expires_at IS NULL AND c.cron = '' AND c.every IS NULL
      AND (c.serial_key IS NULL OR (
          NOT EXISTS (SELECT 1 FROM django_wakes_wake h WHERE h.lane_lock = c.serial_key)
          AND NOT EXISTS (SELECT 1 FROM django_wakes_wake e WHERE e.serial_key = c.serial_key
                          AND e.state = 'pending' AND (e.due_at, e.id) < (c.due_at, c.id))))
    ORDER BY c.due_at, c.id
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
)
RETURNING w.id
"""


def step_claim_ab(args: Any) -> dict[str, Any]:
    """PostgreSQL: time claiming ONE due wake, shipped ``claim_batch`` vs a one-statement claim.

    The one-statement claim covers only the plain case (a time wake without expiry or recurrence,
    which is what the push-latency run creates); it shows what the push path could cost.
    """
    import secrets
    import statistics

    from django.db import connection

    from benchmarks.jobs import reset, seed

    reset()
    kinds = registry.kinds()
    shipped, lean = [], []
    for i in range(args.reps + 3):
        seed(1, in_seconds=-0.001)
        t0 = time.perf_counter()
        claims = engine.claim_batch(runner_id="ab", limit=100)
        dt = time.perf_counter() - t0
        for claim in claims:
            engine.fire(claim)
        seed(1, in_seconds=-0.001)
        now = clock.now()
        t0 = time.perf_counter()
        with connection.cursor() as cursor:  # autocommit: the statement is its own transaction
            cursor.execute(LEAN_CLAIM_SQL, {
                "token": secrets.token_hex(16), "lease_until": now + engine.wakes_settings.lease, "runner": "ab",
                "now": now, "kinds": kinds, "limit": 100,
            })
            got = cursor.fetchall()
        dl = time.perf_counter() - t0
        Wake.objects.filter(pk__in=[r[0] for r in got]).update(state=State.FIRED, lane_lock=None, claim_token=None)
        if i >= 3:  # warm-up
            shipped.append(dt)
            lean.append(dl)
    return {"reps": args.reps, "shipped_claim_ms": statistics.median(shipped) * 1000,
            "one_statement_claim_ms": statistics.median(lean) * 1000}


def claimable_split(now: Any, kinds: list[str]) -> Any:
    """``Wake.objects.claimable()`` with the lane-head test split in two ``NOT EXISTS``.

    The shipped test ``due_at < d OR (due_at = d AND id < i)`` is one OR, which PostgreSQL cannot
    turn into a range on ``wake_lane_head_idx`` (serial_key, state, due_at, id): it scans every
    pending row of the lane. Two separate NOT EXISTS, one per branch, are each a tight index range.
    """
    from django.db.models import Exists, OuterRef, Q

    pending = Wake.objects.filter(state=State.PENDING, serial_key=OuterRef("serial_key"))
    earlier = pending.filter(due_at__lt=OuterRef("due_at"))
    tie = pending.filter(due_at=OuterRef("due_at"), id__lt=OuterRef("id"))
    return (
        Wake.objects.due(now).of_kinds(kinds).lane_free()
        .filter(Q(serial_key__isnull=True) | (~Exists(earlier) & ~Exists(tie)))
        .order_by("due_at", "id")
    )


def time_candidates(reps: int) -> dict[str, float]:
    """Median time of claim_batch's candidate query (ids of up to 100 claimable wakes), shipped vs split."""
    import statistics

    def timed(build: Any) -> float:
        times = []
        for _ in range(reps):
            qs = build(clock.now(), registry.kinds()).values_list("id", flat=True)[:100]
            t0 = time.perf_counter()
            list(qs)
            times.append(time.perf_counter() - t0)
        return statistics.median(times) * 1000

    return {"shipped_ms": timed(Wake.objects.claimable), "split_ms": timed(claimable_split)}


def step_lanes_ab(args: Any) -> dict[str, Any]:
    """PostgreSQL: the candidate query with ``n`` due wakes in ``lanes`` lanes (a backlog), three ways.

    Shipped; with the split lane-head test; and with both the split and a claim index that also
    ends in ``id`` (``state, due_at, id``: the exact ORDER BY, so PostgreSQL walks it in order and
    stops after ``limit`` lane heads instead of testing every due row and sorting). The index is
    created on the benchmark's own database for this measurement and dropped afterwards.
    """
    from django.db import connection

    from benchmarks.jobs import analyze, reset, seed

    reset()
    seed(args.n, lanes=args.lanes)
    analyze()
    out: dict[str, Any] = {"n": args.n, "lanes": args.lanes, "now": time_candidates(args.reps)}
    with connection.cursor() as cursor:
        cursor.execute("CREATE INDEX bench_claim_due_id_idx ON django_wakes_wake (state, due_at, id)")
        cursor.execute("ANALYZE django_wakes_wake")
    try:
        out["with_index"] = time_candidates(args.reps)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("DROP INDEX IF EXISTS bench_claim_due_id_idx")
    return out
