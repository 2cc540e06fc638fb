"""Fair share across workspaces (issue 28 points 1, 2, 5): a busy runner splits its batch between workspaces.

In-process claims on every database: a second workspace's wakes are taken beside the first's backlog,
weights set the split, the order within a workspace and a lane's order are kept, and a runner that is
keeping up claims as before. ``tests/test_fairness_processes.py`` runs the noisy neighbour with real
``runwakes`` processes on PostgreSQL and MariaDB.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from django.core.checks import Error

import django_wakes
from django_wakes import engine
from django_wakes.checks import check_wakes_settings
from django_wakes.engine import fairness
from django_wakes.models import State, Wake

pytestmark = pytest.mark.django_db

KIND = "test.fair"


@pytest.fixture(autouse=True)
def _fresh_picker():
    fairness.reset()
    yield
    fairness.reset()


def _book(workspace: str, n: int, at, **extra) -> list[Wake]:
    return django_wakes.schedule_many(
        [{"at": at + timedelta(milliseconds=i)} for i in range(n)], workspace_id=workspace, kind=KIND, **extra
    )


def _claim(limit: int) -> list[engine.Claim]:
    claims = engine.claim_batch(runner_id="fair-test", limit=limit)
    engine.fire_claims(claims, settle_window=0.0, tries=None)
    return claims


def test_a_second_workspace_is_served_beside_a_backlog(clock, sinks):
    sinks(KIND)
    now = clock.now()
    _book("noisy", 400, now - timedelta(minutes=10))  # due long before B's: claim order alone puts them first
    quiet = _book("quiet", 5, now - timedelta(seconds=1))

    first = _claim(50)  # a full pass: the runner learns that more than one workspace waits
    assert {c.wake.workspace_id for c in first} == {"noisy"}
    second = _claim(50)
    assert len(second) == 50
    assert {c.wake.pk for c in second if c.wake.workspace_id == "quiet"} == {w.pk for w in quiet}
    # The workspaces in turn within the batch: the quiet one's few are not behind the noisy one's many.
    assert [c.wake.workspace_id for c in second[:10]].count("quiet") == 5


def test_a_runner_keeping_up_claims_in_plain_claim_order(clock, sinks):
    sinks(KIND)
    now = clock.now()
    noisy = _book("noisy", 30, now - timedelta(minutes=10))
    quiet = _book("quiet", 5, now - timedelta(seconds=1))
    claims = _claim(100)  # not full: nobody waits behind anybody, so the order of today
    assert [c.wake.pk for c in claims] == [w.pk for w in noisy + quiet]


def test_weights_set_each_workspace_share(clock, sinks, settings):
    sinks(KIND)
    settings.WAKES = {"WORKSPACE_WEIGHTS": {"heavy": 3}}  # "light" weighs the default 1
    now = clock.now()
    _book("heavy", 600, now - timedelta(minutes=10))
    _book("light", 600, now - timedelta(minutes=20))
    _claim(40)
    started = Counter()
    for _ in range(10):
        started.update(c.wake.workspace_id for c in _claim(40))
    assert started["heavy"] + started["light"] == 400
    assert 3 * 0.85 <= started["heavy"] / started["light"] <= 3 * 1.15


def test_weights_from_a_function(clock, sinks, settings):
    sinks(KIND)
    settings.WAKES = {"WORKSPACE_WEIGHTS": "tests.test_fairness.double_gold"}
    now = clock.now()
    _book("gold", 300, now - timedelta(minutes=10))
    _book("tin", 300, now - timedelta(minutes=10))
    _claim(30)
    started = Counter()
    for _ in range(6):
        started.update(c.wake.workspace_id for c in _claim(30))
    assert started == {"gold": 120, "tin": 60}


def double_gold(workspace_id: str) -> float:
    return 2.0 if workspace_id == "gold" else 1.0


def test_the_order_within_a_workspace_is_kept(clock, sinks):
    calls = sinks(KIND)
    now = clock.now()
    _book("noisy", 300, now - timedelta(minutes=10))
    low = _book("ordered", 6, now - timedelta(minutes=5))
    high = _book("ordered", 3, now - timedelta(seconds=30), priority=5)
    _claim(20)
    for _ in range(4):
        _claim(20)
    fired = [pk for pk in calls.ids if pk in {w.pk for w in low + high}]
    assert fired == [w.pk for w in high + low]


def test_a_lane_stays_single_file_and_in_order_across_workspaces(clock, sinks):
    sinks(KIND)
    now = clock.now()
    _book("noisy", 300, now - timedelta(minutes=10))
    lane = [
        django_wakes.schedule(workspace_id=ws, kind=KIND, serial_key="shared", at=now - timedelta(seconds=60 - i))
        for i, ws in enumerate(["a", "b", "a", "b", "a"])
    ]
    claims = engine.claim_batch(runner_id="fair-test", limit=40)  # full: learns the workspaces
    claimed_in_lane: list[int] = []
    first_seen = None
    for n in range(20):
        engine.fire_claims(claims, settle_window=0.0, tries=None)
        claims = engine.claim_batch(runner_id="fair-test", limit=40)
        in_lane = [c for c in claims if c.wake.serial_key == "shared"]
        assert len(in_lane) <= 1  # one firing wake per lane, whichever workspace's share it came in
        if in_lane and first_seen is None:
            first_seen = n
        claimed_in_lane += [c.wake.pk for c in in_lane]
    engine.fire_claims(claims, settle_window=0.0, tries=None)
    assert first_seen == 0  # beside the backlog (which takes 8 passes of 40), not after it
    assert claimed_in_lane == [w.pk for w in lane]
    assert not Wake.objects.filter(pk__in=[w.pk for w in lane]).exclude(state=State.FIRED).exists()


@pytest.mark.parametrize(
    "value",
    [{"ws": 0}, {"ws": -1}, {"ws": "2"}, {"ws": True}, {"ws": float("nan")}, {1: 2}, "no.such.module.weight", 3],
)
def test_bad_weights_are_a_check_error(settings, value):
    settings.WAKES = {"WORKSPACE_WEIGHTS": value}
    errors = [m for m in check_wakes_settings() if isinstance(m, Error)]
    assert [m.id for m in errors] == ["django_wakes.E022"]
    assert "WORKSPACE_WEIGHTS" in errors[0].msg
