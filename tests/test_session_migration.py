"""The migration that keys sessions by workspace keeps what was stopped stopped, in every workspace.

Before it, a stopped session id was stopped in every workspace; after it, a session is
``(workspace_id, session_id)``. The migration gives each workspace holding wakes of a stopped
session id a stopped row of its own, so upgrading never restarts a session an operator stopped,
and migrating back merges them again. The migration is found by what it does (it adds the
``sessioncontrol_uniq`` constraint), so the test outlives a squash.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.db.migrations.operations import AddConstraint

import django_wakes
from django_wakes.engine.sessions import is_stopped
from django_wakes.models import Receipt, SessionControl, State, Wake

STOPPED_AT = datetime(2030, 1, 1, tzinfo=UTC)


def _parent(executor: MigrationExecutor, node: tuple[str, str]) -> tuple[str, str]:
    (parent,) = (p.key for p in executor.loader.graph.node_map[node].parents if p.key[0] == "django_wakes")
    return parent


def _keying_migration(executor: MigrationExecutor) -> tuple[str, str]:
    for node, migration in executor.loader.disk_migrations.items():
        if node[0] == "django_wakes" and any(
            isinstance(op, AddConstraint) and op.constraint.name == "sessioncontrol_uniq" for op in migration.operations
        ):
            return node
    raise AssertionError("no migration adds sessioncontrol_uniq")


def _migrate_to_latest() -> None:
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes("django_wakes"))


def _old_wake(executor: MigrationExecutor, at: tuple[str, str], **fields: object) -> Any:
    """A wake written with the model as it stood at migration ``at``.

    Later migrations add columns to the wake table (``limit_key``): the current model, or the API that
    writes through it, cannot insert into the table as it stood before them.
    """
    OldWake = executor.loader.project_state(at).apps.get_model("django_wakes", "Wake")
    due = datetime(2031, 1, 1, tzinfo=UTC)
    defaults = {"kind": "t.m", "trigger_type": "at", "fire_at": due, "due_at": due}
    return OldWake.objects.create(created_at=STOPPED_AT, updated_at=STOPPED_AT, **{**defaults, **fields})


@pytest.fixture
def before_keying(transactional_db: None) -> Iterator[tuple[MigrationExecutor, tuple[str, str]]]:
    """The database migrated back to just before the keying migration; migrated forward to the latest after."""
    executor = MigrationExecutor(connection)
    node = _keying_migration(executor)
    executor.migrate([_parent(executor, node)])
    try:
        yield executor, node
    finally:
        _migrate_to_latest()


def test_a_session_stopped_before_the_upgrade_stays_stopped_in_every_workspace_that_has_its_wakes(before_keying, sinks):
    sinks("t.m")
    executor, node = before_keying
    old_state = executor.loader.project_state(_parent(executor, node))
    OldSessionControl = old_state.apps.get_model("django_wakes", "SessionControl")
    parent = _parent(executor, node)
    for workspace in ("tenant-a", "tenant-b"):
        _old_wake(executor, parent, workspace_id=workspace, session_id="s")
    _old_wake(executor, parent, workspace_id="tenant-c", session_id="other")
    OldSessionControl.objects.create(
        session_id="s", workspace_id="", stopped_at=STOPPED_AT, stop_reason="runaway", updated_at=STOPPED_AT
    )
    OldSessionControl.objects.create(session_id="idle", workspace_id="tenant-a", updated_at=STOPPED_AT)

    _migrate_to_latest()

    rows = {(r.workspace_id, r.session_id): (r.stopped_at, r.stop_reason) for r in SessionControl.objects.all()}
    assert rows == {
        ("", "s"): (STOPPED_AT, "runaway"),
        ("tenant-a", "s"): (STOPPED_AT, "runaway"),
        ("tenant-b", "s"): (STOPPED_AT, "runaway"),
        ("tenant-a", "idle"): (None, ""),
    }
    for workspace in ("tenant-a", "tenant-b"):
        assert is_stopped("s", workspace_id=workspace)
        with pytest.raises(django_wakes.SessionStopped):
            django_wakes.schedule(workspace_id=workspace, session_id="s", kind="t.m", delay="1h")
    django_wakes.schedule(workspace_id="tenant-c", session_id="s", kind="t.m", delay="1h")  # no wakes: not stopped


def test_migrating_back_merges_a_session_ids_rows_into_one_stopped_row(before_keying, sinks):
    sinks("t.m")
    executor, node = before_keying
    _migrate_to_latest()
    django_wakes.schedule(workspace_id="tenant-a", session_id="s", kind="t.m", delay="1h")
    django_wakes.stop_session("s", reason="stop", workspace_id="tenant-b")
    django_wakes.schedule(workspace_id="tenant-c", session_id="s", kind="t.m", delay="1h", budget=True)
    assert SessionControl.objects.filter(session_id="s").count() == 2

    parent = _parent(executor, node)
    executor = MigrationExecutor(connection)
    executor.migrate([parent])
    old = executor.loader.project_state(parent).apps.get_model("django_wakes", "SessionControl")
    (row,) = old.objects.filter(session_id="s")
    assert row.stopped_at is not None and row.stop_reason == "stop"
    OldWake = executor.loader.project_state(parent).apps.get_model("django_wakes", "Wake")
    assert OldWake.objects.filter(session_id="s", state=State.PENDING).count() == 2


def test_live_turns_in_a_sessions_old_default_lane_move_to_its_workspaces_lane(before_keying):
    """A chain copies its lane to every occurrence: left in ``session:<id>``, an old turn would run beside new ones."""
    executor, node = before_keying
    parent = _parent(executor, node)
    turn = {"kind": "session_turn", "session_id": "s"}
    pending = _old_wake(
        executor, parent, workspace_id="tenant-a", every=timedelta(hours=1), serial_key="session:s", **turn
    )
    firing = _old_wake(
        executor,
        parent,
        workspace_id="tenant-b",
        serial_key="session:s",
        state=State.FIRING,
        lane_lock="session:s",
        **turn,
    )
    own = _old_wake(executor, parent, workspace_id="tenant-a", serial_key="my-lane", **turn)

    _migrate_to_latest()

    lanes = {w.pk: (w.serial_key, w.lane_lock) for w in Wake.objects.all()}
    assert lanes == {
        pending.pk: ("session:tenant-a:s", None),
        firing.pk: ("session:tenant-b:s", "session:tenant-b:s"),
        own.pk: ("my-lane", None),  # a lane its creator named stays
    }

    MigrationExecutor(connection).migrate([parent])
    OldWake = executor.loader.project_state(parent).apps.get_model("django_wakes", "Wake")
    lanes = {w.pk: (w.serial_key, w.lane_lock) for w in OldWake.objects.all()}
    assert lanes == {
        pending.pk: ("session:s", None),
        firing.pk: ("session:s", "session:s"),
        own.pk: ("my-lane", None),
    }


def test_migrating_back_keeps_one_receipt_per_session_and_key_the_done_one(before_keying):
    executor, node = before_keying
    MigrationExecutor(connection).migrate([node])
    assert django_wakes.once("s", "charge", lambda: "A's", workspace_id="tenant-a") == "A's"
    Receipt.objects.create(
        workspace_id="tenant-b",
        session_id="s",
        key="charge",
        state="running",
        owner="x",
        lease_until=STOPPED_AT,
        created_at=STOPPED_AT,
    )

    parent = _parent(executor, node)
    MigrationExecutor(connection).migrate([parent])
    old = MigrationExecutor(connection).loader.project_state(parent).apps.get_model("django_wakes", "Receipt")
    (kept,) = old.objects.filter(session_id="s", key="charge")
    assert kept.state == "done" and kept.result == "A's"
