"""A newcomer's first mistakes end in one line that says what to do, not in a traceback (issue 27, item 3).

Each is made the way a person makes it, with real ``manage.py`` processes: ``runwakes`` (and ``wakes
status``) before ``migrate`` on a database that has never been migrated; ``wakes mcp`` without the
``[mcp]`` extra; ``schedule()`` of a kind whose ``WAKES["SINKS"]`` path failed to import; a ``@task``
with django-wakes' options while ``TASKS`` names another backend (test settings).
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from django.db import connection
from django.test import override_settings

from tests.processes import ROOT, Procs, database_url
from tests.tasks_framework import no_tasks_framework

pytestmark = pytest.mark.django_db(transaction=True)

#: What does not depend on the database runs once per suite run (CI's time), on the SQLite pass.
sqlite_pass = pytest.mark.skipif(
    os.environ.get("WAKES_TEST_DB", "sqlite") != "sqlite", reason="not about the database: runs on the SQLite pass"
)


@pytest.fixture
def empty_database(procs: Procs) -> Iterator[str]:
    """A ``DATABASE_URL`` of a database that exists on the test server but was never migrated."""
    settings = dict(connection.settings_dict)
    if connection.vendor == "sqlite":
        settings["NAME"] = str(procs.workdir / "never-migrated.sqlite3")
        yield database_url(settings) or ""
        return
    name = f"{settings['NAME']}_never_migrated"[:60]
    quoted = connection.ops.quote_name(name)
    drop = f"DROP DATABASE IF EXISTS {quoted}" + (" WITH (FORCE)" if connection.vendor == "postgresql" else "")
    with connection.cursor() as cursor:
        cursor.execute(drop)
        cursor.execute(f"CREATE DATABASE {quoted}")
    settings["NAME"] = name
    try:
        yield database_url(settings) or ""
    finally:
        procs.cleanup()  # no child may still hold a connection to it
        with connection.cursor() as cursor:
            cursor.execute(drop)


def one_line_error(done: subprocess.CompletedProcess) -> str:
    """The command failed with exit status 1 and said so in one line, no traceback; return that line."""
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert "Traceback" not in output, output
    errors = [line for line in done.stderr.splitlines() if line.startswith("CommandError:")]
    assert len(errors) == 1, output
    return errors[0]


@pytest.mark.parametrize(
    "command",
    [
        ["runwakes"],
        pytest.param(["runwakes", "--once"], marks=sqlite_pass),
        pytest.param(["wakes", "status"], marks=sqlite_pass),
    ],
)
def test_a_runner_before_migrate_says_run_migrate(procs: Procs, empty_database: str, command: list[str]):
    done = procs.manage(*command, timeout=60, DATABASE_URL=empty_database)
    line = one_line_error(done)
    migrations = sorted(path.stem for path in (ROOT / "django_wakes" / "migrations").glob("0*.py"))
    assert f"{len(migrations)} migrations of django_wakes ({migrations[0]} … {migrations[-1]}) are not applied" in line
    assert line.endswith("on database 'default': run `python manage.py migrate` first"), line


def test_check_database_reports_the_missing_migrations(procs: Procs, empty_database: str):
    check = procs.manage("check", "--database", "default", DATABASE_URL=empty_database)
    assert check.returncode == 1, check.stdout + check.stderr
    assert "django_wakes.E016" in check.stderr
    assert "run `python manage.py migrate` first" in check.stderr


@sqlite_pass
def test_migrate_is_not_blocked_by_the_check_and_after_it_the_runner_starts(procs: Procs, empty_database: str):
    """``migrate`` runs the database checks first and must not be refused by E016; after it, the check passes
    and a runner starts."""
    migrate = procs.manage("migrate", "django_wakes", "--verbosity", "1", timeout=180, DATABASE_URL=empty_database)
    assert migrate.returncode == 0, migrate.stdout + migrate.stderr
    assert "E016" not in migrate.stdout + migrate.stderr

    again = procs.manage("check", "--database", "default", DATABASE_URL=empty_database)
    assert again.returncode == 0 and "E016" not in again.stdout + again.stderr, again.stdout + again.stderr
    runner = procs.manage("runwakes", "--once", DATABASE_URL=empty_database)
    assert runner.returncode == 0, runner.stdout + runner.stderr


#: ``wakes mcp`` in a Python where the MCP SDK cannot be imported (as without the ``[mcp]`` extra): ``None``
#: in ``sys.modules`` is how Python documents making a module unimportable.
WITHOUT_MCP = """
import sys
for name in ("mcp", "anyio"):
    sys.modules[name] = None
from django.core.management import execute_from_command_line
execute_from_command_line(["manage.py", "wakes", "mcp", "--workspace", "w1", "--session", "s1"])
"""


@sqlite_pass
def test_wakes_mcp_without_the_extra_gives_the_pip_command(procs: Procs):
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_MCP],
        cwd=ROOT,
        env=procs.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    line = one_line_error(done)
    assert "wakes mcp needs the MCP SDK" in line and "pip install 'django-wakes[mcp]'" in line, line


@sqlite_pass
def test_an_unknown_kind_whose_sinks_path_failed_names_the_path_and_why(procs: Procs):
    """The runner refuses such settings (E005); a web process does not run checks, and its ``schedule()`` said
    only "no sink is registered": now it says which ``WAKES["SINKS"]`` entry failed, and why."""
    create = "import django_wakes; django_wakes.schedule(workspace_id='w1', kind='mail.send', delay='1m')"
    done = procs.manage(
        "shell", "-c", create, WAKES_TEST_SINKS=json.dumps({"mail.send": "testproject.broken_module.send"})
    )
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("django_wakes.exceptions.UnknownKind")]
    assert "no sink is registered for kind 'mail.send'" in line
    assert "WAKES['SINKS']['mail.send'] = 'testproject.broken_module.send' did not load" in line
    assert "RuntimeError: testproject.broken_module refuses to load" in line
    assert "django_wakes.E005" in line


def test_an_unknown_kind_without_a_sinks_entry_keeps_the_short_message():
    from django_wakes import UnknownKind, schedule

    with pytest.raises(UnknownKind, match=r"^no sink is registered for kind 'nobody\.knows'$"):
        schedule(workspace_id="w1", kind="nobody.knows", delay="1m")


def test_a_task_with_wakes_options_imports_under_another_backend():
    """Test settings often point ``TASKS`` at the immediate backend: the task module still imports, and the task
    runs as that backend runs every task (the options are django-wakes'; that backend has none)."""
    from django_wakes.tasks import framework_available

    if not framework_available():
        no_tasks_framework()
    from django_wakes.tasks.compat import FRAMEWORK

    immediate = {"default": {"BACKEND": f"{FRAMEWORK}.backends.immediate.ImmediateBackend"}}
    from django_wakes.tasks import WakesTask

    sys.modules.pop("tests.portable_tasks", None)
    with override_settings(TASKS=immediate):
        module = importlib.import_module("tests.portable_tasks")
        assert not isinstance(module.double, WakesTask)
        assert module.double.enqueue(21).return_value == 42

    sys.modules.pop("tests.portable_tasks", None)
    module = importlib.import_module("tests.portable_tasks")
    assert isinstance(module.double, WakesTask)
    assert (module.double.max_attempts, module.double.serial_key) == (3, "user:{user_id}")
    assert module.double.backoff == "30s"
    assert module.double.limit_key == "crm:{user_id}"
