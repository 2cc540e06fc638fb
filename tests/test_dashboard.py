"""The dashboard: its numbers (``django_wakes.console.stats``) from wakes the real engine fired, and its page.

Every figure is checked against what the test did through the engine (scheduled, fired late, failed,
buried, claimed by a runner), with the fake clock deciding how late.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import django_wakes
from django_wakes import engine
from django_wakes.console import stats, workspaces
from django_wakes.console.charts import ChartSeries, bar_chart, nice_ceiling
from django_wakes.engine import runners as runner_rows
from django_wakes.models import State, TriggerType, Wake
from django_wakes.querysets import stale_after
from django_wakes.signals import occurrences_missed
from django_wakes.testing import FakeClock

pytestmark = pytest.mark.django_db

KIND = "test.dashboard"
OTHER = "test.dashboard.other"
WS = "ws-dash"
DASHBOARD = "admin:django_wakes_dashboard"


def fire_late(clock: FakeClock, seconds: float, kind: str = KIND) -> Wake:
    """Schedule a wake due now, let ``seconds`` pass, then run a pass: it starts that late."""
    wake = django_wakes.schedule(workspace_id=WS, kind=kind, at=clock.now())
    clock.advance(timedelta(seconds=seconds))
    django_wakes.run_due()
    return Wake.objects.get(pk=wake.pk)


# --------------------------------------------------------------------------------------------------
# Lateness
# --------------------------------------------------------------------------------------------------


def test_lateness_counts_each_settled_attempt_in_its_bucket(clock: FakeClock, sinks: Any) -> None:
    sinks(KIND)
    since = clock.now()
    for seconds in (0.03, 0.3, 0.3, 20, 4000):
        assert fire_late(clock, seconds).state == State.FIRED
    histogram = stats.lateness(since)
    assert histogram.count == 5
    assert histogram.sum_seconds == pytest.approx(0.03 + 0.3 + 0.3 + 20 + 4000)
    by_bound = dict(zip(histogram.bounds, histogram.cumulative, strict=True))
    assert by_bound[0.05] == 1
    assert by_bound[0.25] == 1
    assert by_bound[0.5] == 3
    assert by_bound[10.0] == 3
    assert by_bound[30.0] == 4
    assert by_bound[3600.0] == 4  # the 4000 s one is beyond the last bound: count - cumulative[-1]


def test_lateness_leaves_out_failed_attempts_and_measures_the_retry_from_its_own_due_time(
    clock: FakeClock, sinks: Any
) -> None:
    """A failure overwrites due_at with the retry's time: the settling attempt is measured from that."""
    failing = {"left": 1}

    def fail_once(wake: Any, result: Any) -> None:
        if failing["left"]:
            failing["left"] -= 1
            raise RuntimeError("first attempt fails")

    sinks(KIND, then=fail_once)
    since = clock.now()
    wake = django_wakes.schedule(workspace_id=WS, kind=KIND, at=clock.now())
    clock.advance(timedelta(seconds=2))
    django_wakes.run_due()  # fails 2 s late; retried after the backoff
    retry_due = Wake.objects.get(pk=wake.pk).due_at
    assert retry_due is not None
    clock.set(retry_due + timedelta(seconds=0.2))
    django_wakes.run_due()
    assert Wake.objects.get(pk=wake.pk).state == State.FIRED
    histogram = stats.lateness(since)
    assert histogram.count == 1
    assert histogram.sum_seconds == pytest.approx(0.2)
    assert stats.attempts_by_outcome(since)["failed"] == 1
    assert stats.attempts_by_outcome(since)["fired"] == 1


def test_lateness_is_windowed(clock: FakeClock, sinks: Any) -> None:
    sinks(KIND)
    fire_late(clock, 7)
    clock.advance(timedelta(hours=2))
    fire_late(clock, 0.3)
    assert stats.lateness(clock.now() - stats.HOUR).count == 1
    assert stats.lateness(clock.now() - stats.DAY).count == 2


@pytest.mark.parametrize(
    ("q", "expected"),
    [
        (0.5, 0.25 + 0.25 * (50 - 40) / 40),  # inside (0.25, 0.5]: 40 below, 40 inside
        (0.99, 0.5 + 4.5 * (99 - 80) / 20),  # inside (0.5, 5]: 80 below, 20 inside
        (0.1, 0.05),  # exactly the first bucket's count
    ],
)
def test_quantiles_interpolate_inside_their_bucket(q: float, expected: float) -> None:
    histogram = stats.Histogram(bounds=(0.05, 0.25, 0.5, 5.0), cumulative=(10, 40, 80, 100), count=100, sum_seconds=0.0)
    assert histogram.quantile(q) == pytest.approx(expected)


def test_a_quantile_beyond_the_last_bound_is_the_last_bound_and_none_without_data() -> None:
    beyond = stats.Histogram(bounds=(1.0, 2.0), cumulative=(1, 1), count=10, sum_seconds=0.0)
    assert beyond.quantile(0.99) == 2.0
    assert stats.Histogram(bounds=(1.0,), cumulative=(0,), count=0, sum_seconds=0.0).quantile(0.5) is None


# --------------------------------------------------------------------------------------------------
# Activity, backlog, missed occurrences, runners
# --------------------------------------------------------------------------------------------------


def test_activity_puts_fires_failures_and_dead_letters_in_their_minute(clock: FakeClock, sinks: Any) -> None:
    sinks(KIND)
    sinks(OTHER, then=RuntimeError("always broken"))
    clock.set(clock.now().replace(hour=12, minute=0))
    fire_late(clock, 1)  # a fire started at 12:00:01
    clock.set(clock.now().replace(minute=30, second=5))
    doomed = django_wakes.schedule(workspace_id=WS, kind=OTHER, at=clock.now(), max_attempts=1)
    django_wakes.run_due()  # fails its only attempt at 12:30:05 and goes dead
    assert Wake.objects.get(pk=doomed.pk).state == State.DEAD
    clock.set(clock.now().replace(minute=45))

    hour = stats.activity(clock.now(), stats.HOUR, stats.MINUTE)
    assert len(hour.fires) == 60 and hour.times[-1] == clock.now().replace(second=0, microsecond=0)
    fire_index = hour.times.index(clock.now().replace(minute=0, second=0, microsecond=0))
    failure_index = hour.times.index(clock.now().replace(minute=30, second=0, microsecond=0))
    assert hour.fires[fire_index] == 1 and sum(hour.fires) == 1
    assert hour.failures[failure_index] == 1 and sum(hour.failures) == 1
    assert hour.dead[failure_index] == 1 and sum(hour.dead) == 1

    day = stats.activity(clock.now(), stats.DAY, stats.HOUR)
    assert len(day.fires) == 24
    assert day.fires[-1] == 1 and day.failures[-1] == 1 and day.dead[-1] == 1
    assert sum(day.fires) == 1


def test_a_long_sinks_attempt_counts_in_the_minute_it_finished(clock: FakeClock, sinks: Any) -> None:
    """Windows go by finished_at: a window that had moved past the start would never see the attempt."""

    def slow(wake: Any, result: Any) -> None:
        clock.advance(timedelta(minutes=5))

    sinks(KIND, then=slow)
    clock.set(clock.now().replace(hour=12, minute=0))
    django_wakes.schedule(workspace_id=WS, kind=KIND, at=clock.now())
    django_wakes.run_due()  # claimed at 12:00, finished at 12:05
    hour = stats.activity(clock.now(), stats.HOUR, stats.MINUTE)
    assert hour.fires[hour.times.index(clock.now().replace(second=0, microsecond=0))] == 1
    assert sum(hour.fires) == 1
    assert stats.attempts_by_outcome(clock.now().replace(minute=1))["fired"] == 1


def test_activity_refuses_other_steps(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="minute or by the hour"):
        stats.activity(clock.now(), stats.DAY, timedelta(minutes=15))


def make_row(clock: FakeClock, state: str, kind: str = KIND, **fields: Any) -> Wake:
    now = clock.now()
    values: dict[str, Any] = {
        "workspace_id": WS,
        "trigger_type": TriggerType.AT,
        "kind": kind,
        "state": state,
        "fire_at": now,
        "due_at": now,
        "created_at": now,
        "updated_at": now,
    }
    values.update(fields)
    return Wake.objects.create(**values)


def test_backlog_counts_live_wakes_by_kind_and_settled_ones_of_the_last_day(clock: FakeClock) -> None:
    now = clock.now()
    make_row(clock, State.PENDING, due_at=now - timedelta(minutes=5))  # overdue
    make_row(clock, State.PENDING, due_at=now - timedelta(seconds=30))  # due, not yet overdue
    make_row(clock, State.PENDING, due_at=now + timedelta(minutes=30))  # due within the hour
    make_row(clock, State.PENDING, due_at=now + timedelta(hours=3))
    make_row(clock, State.PENDING, kind=OTHER, fire_at=None, due_at=None, trigger_type=TriggerType.ON_EVENT)  # waiting
    make_row(clock, State.FIRING, kind=OTHER, lease_until=now - timedelta(seconds=1), claimed_by="gone")
    make_row(clock, State.FIRING, kind=OTHER, lease_until=now + timedelta(seconds=10), claimed_by="alive")
    make_row(clock, State.FIRED, updated_at=now - timedelta(hours=2))
    make_row(clock, State.DEAD, updated_at=now - timedelta(hours=23))
    make_row(clock, State.FIRED, updated_at=now - timedelta(days=2))  # older than the window

    backlog = stats.backlog(now)
    by_kind = {k.kind: k for k in backlog.by_kind}
    assert by_kind[KIND] == stats.KindBacklog(KIND, pending=4, due=2, overdue=1, due_next_hour=1)
    assert by_kind[OTHER] == stats.KindBacklog(OTHER, pending=1, waiting=1, firing=2, lapsed=1)
    assert backlog.total == stats.KindBacklog(
        "all", pending=5, waiting=1, due=2, overdue=1, due_next_hour=1, firing=2, lapsed=1
    )
    assert backlog.unwakeable is None  # not asked: no fireable kinds given
    # unwakeable: due pending and lapsed firing wakes of the kinds no runner fires
    assert stats.backlog(now, fireable_kinds=[KIND]).unwakeable == 1  # OTHER's lapsed one
    assert stats.backlog(now, fireable_kinds=[OTHER]).unwakeable == 2  # KIND's two due ones
    assert stats.backlog(now, fireable_kinds=[KIND, OTHER]).unwakeable == 0
    settled = stats.settled_by_state(now - stats.DAY)
    assert settled == {"fired": 1, "expired": 0, "cancelled": 0, "dead": 1, "superseded": 0}
    assert backlog.oldest_overdue == now - timedelta(minutes=5)


def test_waiting_counts_watchers_and_approvals_whose_trigger_has_not_come(clock: FakeClock, sinks: Any) -> None:
    """Most have an expiry, hence a due time; a paused chain's held occurrence has none but waits for no event."""
    import django_wakes

    sinks(KIND)
    sinks(OTHER)

    django_wakes.watch(workspace_id=WS, event_key="ci:pass", expires_in="7d", kind=OTHER)
    django_wakes.request_approval(workspace_id=WS, prompt="Deploy?", expires_in="30m", kind=OTHER)
    chain = django_wakes.schedule(workspace_id=WS, kind=KIND, cron="0 * * * *", tz="UTC")
    django_wakes.pause_chain(chain.chain_id)
    backlog = stats.backlog(clock.now())
    by_kind = {k.kind: k for k in backlog.by_kind}
    assert by_kind[OTHER].waiting == 2 and by_kind[KIND].waiting == 0
    assert by_kind[OTHER].due_next_hour == 1  # the approval expires within the hour: it is due then
    django_wakes.deliver_event(workspace_id=WS, event_key="ci:pass")
    assert {k.kind: k for k in stats.backlog(clock.now()).by_kind}[OTHER].waiting == 1  # the event came


def test_backlog_sums_kinds_past_the_cap(clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stats, "KIND_ROWS", 2)
    for index, count in enumerate((3, 2, 1, 1)):
        for _ in range(count):
            make_row(clock, State.PENDING, kind=f"kind-{index}")
    kinds = stats.backlog(clock.now()).by_kind
    assert [(k.kind, k.pending) for k in kinds] == [("kind-0", 3), ("kind-1", 2), (stats.OTHER_KINDS, 2)]


@pytest.mark.parametrize("policy", ["latest", "skip"])
def test_missed_occurrences_match_what_the_signal_announced(clock: FakeClock, sinks: Any, policy: str) -> None:
    sinks(KIND)
    announced: list[int] = []

    def receiver(sender: Any, wake: Any, missed: int, policy: str, **kwargs: Any) -> None:
        announced.append(missed)

    occurrences_missed.connect(receiver, dispatch_uid="test-dashboard-missed")
    try:
        django_wakes.schedule(workspace_id=WS, kind=KIND, every="1h", catch_up=policy)
        clock.advance(timedelta(hours=4, minutes=10))  # the runners were down for four slots
        with django_wakes_on_commit():
            django_wakes.run_due()
    finally:
        occurrences_missed.disconnect(dispatch_uid="test-dashboard-missed")
    assert announced and sum(announced) >= 3
    assert stats.missed_occurrences(clock.now() - stats.DAY) == {policy: sum(announced)}
    assert stats.missed_occurrences(clock.now() + timedelta(seconds=1)) == {}


def django_wakes_on_commit() -> Any:
    """Run on-commit callbacks at once: the signal is sent on commit, and this test is one transaction."""
    from django.test import TestCase

    return TestCase.captureOnCommitCallbacks(execute=True)


def test_runners_show_the_wakes_in_their_hands_and_the_orphans(clock: FakeClock, sinks: Any) -> None:
    sinks(KIND)
    runner_rows.register("runner-a")
    runner_rows.register("runner-old")
    clock.advance(stale_after() + timedelta(seconds=1))
    runner_rows.register("runner-a")  # runner-a beats again; runner-old has gone quiet
    wakes = [django_wakes.schedule(workspace_id=WS, kind=KIND, at=clock.now()) for _ in range(3)]
    claims = engine.claim_batch(runner_id="runner-a", limit=2)
    make_row(clock, State.FIRING, claimed_by="runner-old", lease_until=clock.now() + timedelta(seconds=5))

    found = stats.runners(clock.now(), wakes_per_runner=1)
    assert found.live_count == 1 and found.stale_count == 1 and found.orphaned == 1
    (entry,) = found.live
    assert entry.runner.pk == "runner-a"
    assert entry.holding == 2
    assert len(entry.wakes) == 1 and entry.wakes[0].id in {c.wake.pk for c in claims}
    assert {c.wake.pk for c in claims} <= {w.pk for w in wakes}


# --------------------------------------------------------------------------------------------------
# Charts
# --------------------------------------------------------------------------------------------------


def test_a_chart_escapes_its_texts_and_titles_every_bar() -> None:
    svg = bar_chart(
        chart_id="c1",
        title="<b>fires</b>",
        description='a "quoted" & <odd> description',
        labels=["12:00", "<12:01>"],
        series=[ChartSeries("fires", "fires", [3, 0]), ChartSeries("fail<ures>", "failures", [1, 2])],
        tick_every=1,
    )
    assert svg.startswith('<svg class="wakes-chart"') and svg.endswith("</svg>")
    assert 'role="img" aria-labelledby="c1-title c1-desc"' in svg
    assert '<title id="c1-title">&lt;b&gt;fires&lt;/b&gt;</title>' in svg
    assert "a &quot;quoted&quot; &amp; &lt;odd&gt; description" in svg
    assert "<title>12:00: fires 3, fail&lt;ures&gt; 1</title>" in svg
    assert "<title>&lt;12:01&gt;: fires 0, fail&lt;ures&gt; 2</title>" in svg
    assert "<b>" not in svg and "<odd>" not in svg
    assert svg.count('class="fires"') == 1 and svg.count('class="failures"') == 2  # no bar for a zero


def test_a_chart_needs_a_value_per_label() -> None:
    with pytest.raises(ValueError, match="one value per label"):
        bar_chart(chart_id="c", title="t", description="d", labels=["a"], series=[ChartSeries("s", "s", [1, 2])])


@pytest.mark.parametrize(("value", "top"), [(0, 1), (0.3, 0.5), (7, 10), (11, 20), (240, 250), (1000, 1000)])
def test_axis_tops_are_round(value: float, top: float) -> None:
    assert nice_ceiling(value) == top


# --------------------------------------------------------------------------------------------------
# The page
# --------------------------------------------------------------------------------------------------


@pytest.fixture
def viewer(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user("viewer", password="x", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_wake"))
    return user


def client_for(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_anonymous_visitors_are_sent_to_the_login(client: Client) -> None:
    response = client.get(reverse(DASHBOARD))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_staff_without_the_view_permission_are_refused(django_user_model: Any) -> None:
    staff = django_user_model.objects.create_user("staff", password="x", is_staff=True)
    assert client_for(staff).get(reverse(DASHBOARD)).status_code == 403


def test_the_page_shows_the_backlog_lateness_and_runners(clock: FakeClock, sinks: Any, viewer: Any) -> None:
    sinks(KIND)
    fire_late(clock, 0.3)
    runner_rows.register("runner-on-the-page")
    django_wakes.schedule(workspace_id=WS, kind=KIND, at=clock.now())
    (claim,) = engine.claim_batch(runner_id="runner-on-the-page")
    make_row(clock, State.PENDING, kind="<script>alert(1)</script>", due_at=clock.now() - timedelta(minutes=3))

    response = client_for(viewer).get(reverse(DASHBOARD))
    assert response.status_code == 200
    page = response.content.decode()
    cards = {card.label: card.value for row in response.context["cards"] for card in row}
    assert cards["overdue"] == 1 and cards["firing"] == 1 and cards["live runners"] == 1
    lateness = response.context["lateness"]
    # one attempt 0.3 s late, in the (0.25 s, 0.5 s] bucket: p50 interpolates to its middle
    assert (lateness[0].measured, lateness[0].p50, lateness[0].p99) == (1, "0.38 s", "0.50 s")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert "runner-on-the-page" in page
    assert reverse("admin:django_wakes_wake_change", args=[claim.wake.pk]) in page
    assert page.count('role="img"') == 4
    assert "?attention=overdue" in page


def test_the_number_of_queries_does_not_grow_with_the_rows(clock: FakeClock, sinks: Any, viewer: Any) -> None:
    """Aggregates and LIMITs only: ten times the runners, kinds and wakes cost no more queries."""
    sinks(KIND)
    client = client_for(viewer)

    def queries_for_a_render() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(reverse(DASHBOARD)).status_code == 200
        return len(captured)

    def grow(runners: int) -> None:
        for index in range(runners):
            runner_rows.register(f"runner-{clock.now().timestamp()}-{index}")
            for kind in (f"kind-{index}-a", f"kind-{index}-b"):
                make_row(clock, State.PENDING, kind=kind, due_at=clock.now() - timedelta(minutes=5))
                make_row(clock, State.FIRING, kind=kind, claimed_by=f"runner-{clock.now().timestamp()}-{index}")
        fire_late(clock, 0.5)

    grow(2)
    few = queries_for_a_render()
    grow(20)
    assert queries_for_a_render() == few


def test_fires_per_minute_divide_by_the_minutes_the_window_covers(clock: FakeClock, sinks: Any, viewer: Any) -> None:
    sinks(KIND)
    clock.set(clock.now().replace(hour=11, minute=30))
    for _ in range(300):
        django_wakes.schedule(workspace_id=WS, kind=KIND, at=clock.now())
    while django_wakes.run_due().fired:
        pass
    clock.set(clock.now().replace(hour=12, minute=0, second=30))
    (last_hour, last_day) = client_for(viewer).get(reverse(DASHBOARD)).context["lateness"]
    assert last_hour.fires_per_minute == "5.04"  # 300 / 59.5: the minute buckets start at 11:01:00
    assert last_day.fires_per_minute == "0.22"  # 300 / 1380.5: the hour buckets start at 13:00 yesterday


def test_the_page_tells_unwakeable_and_hung_wakes_apart_from_overdue(
    clock: FakeClock, sinks: Any, viewer: Any, settings: Any
) -> None:
    settings.WAKES = {**settings.WAKES, "LEASE": "15s"}
    sinks(KIND)
    sinks(OTHER)  # this process could fire OTHER, but the one live runner records only KIND
    runner_rows.register("runner-of-kind", kinds=[KIND])
    now = clock.now()
    make_row(clock, State.PENDING, kind=OTHER, due_at=now - timedelta(seconds=30))  # due, nobody fires OTHER
    make_row(clock, State.PENDING, kind=KIND, due_at=now - timedelta(minutes=5))  # overdue, but fireable
    make_row(  # a live runner keeps renewing its lease, but its sink has run for 75 s
        clock,
        State.FIRING,
        claimed_by="runner-of-kind",
        claimed_at=now - timedelta(seconds=75),
        lease_until=now + timedelta(seconds=10),
    )
    make_row(clock, State.FIRING, claimed_by="runner-of-kind", claimed_at=now, lease_until=now + timedelta(seconds=15))

    response = client_for(viewer).get(reverse(DASHBOARD))
    cards = {card.label: card.value for row in response.context["cards"] for card in row}
    assert (cards["unwakeable"], cards["overdue"], cards["hung"], cards["firing"]) == (1, 1, 1, 2)
    kinds = {row.backlog.kind: row.unserved for row in response.context["kinds"]}
    assert kinds == {OTHER: True, KIND: False}
    page = response.content.decode()
    assert "no live runner fires it" in page
    assert "?attention=unwakeable" in page and "?attention=hung" in page


def test_the_app_index_links_to_the_dashboard(viewer: Any) -> None:
    page = client_for(viewer).get(reverse("admin:app_list", args=["django_wakes"])).content.decode()
    assert f'href="{reverse(DASHBOARD)}"' in page


def test_the_page_shows_the_workspaces_with_the_most_due_wakes_and_sums_the_rest(
    clock: FakeClock, sinks: Any, viewer: Any
) -> None:
    """Issue 28: backlog and lateness per workspace, the top WORKSPACE_ROWS itemised, the rest one row."""
    sinks(KIND)
    fire_late(clock, 3.0)  # WS: one wake fired 3 s late in the last hour
    now = clock.now()
    for n in range(1, workspaces.WORKSPACE_ROWS + 6):  # ws-01 has 1 due wake ... ws-25 has 25
        django_wakes.schedule_many(
            [{"at": now - timedelta(seconds=n)} for _ in range(n)], workspace_id=f"ws-{n:02d}", kind=KIND
        )
    django_wakes.schedule(workspace_id="ws-25", kind=KIND, at=now + timedelta(hours=1))  # pending, not due

    response = client_for(viewer).get(reverse(DASHBOARD))
    assert response.status_code == 200
    rows = response.context["workspaces"]
    shown = [row.backlog.workspace_id for row in rows]
    assert shown == [f"ws-{n:02d}" for n in range(25, 5, -1)] + [workspaces.OTHER_WORKSPACES]
    top, rest = rows[0], rows[-1]
    assert (top.backlog.pending, top.backlog.due, top.waited) == (26, 25, "25 s")
    # ws-01 .. ws-05 (15 due) and WS (nothing pending, one fired 3 s late) are the rest
    assert (rest.backlog.due, rest.backlog.fired_hour, rest.mean_lateness, rest.waited) == (15, 1, "3.00 s", "5.00 s")
    assert rest.url == "" and "q=ws-25" in top.url
    page = response.content.decode()
    assert 'id="workspaces"' in page and "(other workspaces)" in page
