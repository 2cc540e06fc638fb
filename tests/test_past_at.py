"""``schedule(at=...)`` years in the past (issue 26): refused beyond ``WAKES["PAST_AT_LIMIT"]``, and lateness
measured from creation for a wake created after it was due, so one such row cannot skew the p99.

A Tasks ``run_after`` in the past is ordinary in Django's API: it runs at once and keeps its ``run_after``.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.checks import run_checks

import django_wakes
from django_wakes.console import stats
from django_wakes.exceptions import InvalidTime
from django_wakes.models import State, Wake
from django_wakes.tasks import framework_available

pytestmark = pytest.mark.django_db

WS, KIND = "ws-past", "t.past"


def test_an_at_older_than_the_limit_is_refused_with_the_bound(clock, sinks, settings):
    sinks(KIND)
    years_ago = clock.now() - timedelta(days=2520)  # 6.9 years
    with pytest.raises(InvalidTime, match=r"2,520 days in the past, more than WAKES\['PAST_AT_LIMIT'\] \(1 day\)"):
        django_wakes.schedule(workspace_id=WS, kind=KIND, at=years_ago)
    with pytest.raises(InvalidTime, match="schedule_many item 1: at"):
        django_wakes.schedule_many([{"delay": "0s"}, {"at": years_ago}], workspace_id=WS, kind=KIND)
    assert not Wake.objects.exists()
    recent = django_wakes.schedule(workspace_id=WS, kind=KIND, at=clock.now() - timedelta(hours=23))
    assert recent.due_at == clock.now() - timedelta(hours=23)  # within the bound: due at once, as before
    settings.WAKES = {**settings.WAKES, "PAST_AT_LIMIT": None}
    assert django_wakes.schedule(workspace_id=WS, kind=KIND, at=years_ago).fire_at == years_ago


def test_the_limit_is_a_checked_setting(settings):
    settings.WAKES = {**settings.WAKES, "PAST_AT_LIMIT": "one day"}
    assert [m.id for m in run_checks() if "PAST_AT_LIMIT" in m.msg] == ["django_wakes.E001"]
    settings.WAKES = {**settings.WAKES, "PAST_AT_LIMIT": "7d"}
    assert not [m for m in run_checks() if "PAST_AT_LIMIT" in m.msg]


def test_lateness_counts_from_creation_for_a_wake_created_after_it_was_due(clock, sinks, settings):
    sinks(KIND)
    settings.WAKES = {**settings.WAKES, "PAST_AT_LIMIT": None}  # a row as old code (or raw SQL) made it
    since = clock.now()
    django_wakes.schedule(workspace_id=WS, kind=KIND, at=clock.now() - timedelta(days=2520))
    clock.advance("2s")
    django_wakes.run_due()
    django_wakes.schedule(workspace_id=WS, kind=KIND, at=clock.now())  # an ordinary one, 3 s late
    clock.advance("3s")
    django_wakes.run_due()
    histogram = stats.lateness(since)
    assert histogram.count == 2 and histogram.sum_seconds == pytest.approx(5.0)
    assert histogram.quantile(0.99) <= 5.0


@pytest.mark.skipif(not framework_available(), reason="needs django.tasks or the django-tasks backport")
def test_a_tasks_run_after_long_past_runs_at_once_and_keeps_its_run_after(clock):
    from testproject import tasks

    long_ago = clock.now() - timedelta(days=2520)
    result = tasks.add.using(run_after=long_ago).enqueue(1, 2)
    assert result.task.run_after == long_ago
    wake = Wake.objects.get()
    assert wake.due_at == clock.now() and wake.created_at == clock.now()
    django_wakes.run_due()
    fetched = tasks.add.get_result(result.id)
    assert Wake.objects.get().state == State.FIRED and fetched.task.run_after == long_ago and fetched.return_value == 3
    recent = clock.now() - timedelta(hours=1)  # within the bound: kept as the wake's time, as before
    assert tasks.add.using(run_after=recent).enqueue(1, 2).task.run_after == recent
