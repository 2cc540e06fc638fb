"""System checks: misconfiguration is reported at start-up instead of as wakes that never fire."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.core import checks
from django.core.management import call_command

from django_wakes.checks import check_login_page, check_tasks_backend, check_wakes_settings
from django_wakes.conf import DEFAULTS, wakes_settings
from django_wakes.sinks import registry
from tests.processes import Procs


def ids(messages):
    return sorted(m.id for m in messages)


def test_testproject_settings_are_clean():
    assert check_wakes_settings() == []
    assert check_login_page() == []
    assert check_tasks_backend() == []


def test_missing_authorize_warns(settings):
    settings.WAKES = {**settings.WAKES, "AUTHORIZE": None}
    messages = check_wakes_settings()
    assert ids(messages) == ["django_wakes.W001"]
    (warning,) = messages
    assert warning.level == checks.WARNING
    assert "AUTHORIZE" in warning.msg and "cannot be resolved" in warning.msg


def test_missing_spawn_turn_warns(settings):
    settings.WAKES = {k: v for k, v in settings.WAKES.items() if k != "SPAWN_TURN"}
    messages = check_wakes_settings()
    assert ids(messages) == ["django_wakes.W002"]
    assert "SPAWN_TURN" in messages[0].msg
    assert messages[0].level == checks.WARNING


def test_no_wakes_setting_at_all_warns_twice(settings):
    del settings.WAKES
    assert ids(check_wakes_settings()) == ["django_wakes.W001", "django_wakes.W002"]


def test_unknown_setting_name_warns(settings):
    settings.WAKES = {**settings.WAKES, "LEASES": "5m"}
    messages = check_wakes_settings()
    assert ids(messages) == ["django_wakes.W003"]
    assert "LEASES" in messages[0].msg


@pytest.mark.parametrize("name", ["LEASE", "ONCE_WAIT", "ONCE_LEASE"])
def test_bad_duration_setting_is_an_error(settings, name):
    settings.WAKES = {**settings.WAKES, name: "five minutes"}
    messages = check_wakes_settings()
    assert ids(messages) == ["django_wakes.E001"]
    assert messages[0].level == checks.ERROR


@pytest.mark.parametrize("name", ["LEASE", "ONCE_LEASE"])
def test_a_zero_lease_is_an_error(settings, name):
    """A zero lease would make every claim raise at run time; the check must say so at start-up."""
    settings.WAKES = {**settings.WAKES, name: "0s"}
    assert ids(check_wakes_settings()) == ["django_wakes.E001"]


@pytest.mark.parametrize("name", ["SPAWN_TURN", "AUTHORIZE", "ON_APPROVAL", "MCP_AUTH"])
def test_unimportable_hook_is_an_error(settings, name):
    settings.WAKES = {**settings.WAKES, name: "testproject.nowhere.hook"}
    messages = check_wakes_settings()
    assert ids(messages) == ["django_wakes.E002"]
    assert name in messages[0].msg


def test_callable_hooks_are_accepted(settings):
    settings.WAKES = {**settings.WAKES, "SPAWN_TURN": lambda s, r: None, "AUTHORIZE": lambda a, w: False}
    assert check_wakes_settings() == []


@pytest.mark.django_db  # the full check run includes model checks that may ask the database
def test_checks_are_registered_with_django(settings, capsys):
    settings.WAKES = {**settings.WAKES, "AUTHORIZE": None}
    messages = checks.run_checks()
    assert "django_wakes.W001" in ids(messages)
    call_command("check")  # warnings do not fail the check command
    assert "django_wakes.W001" in capsys.readouterr().err


def test_no_approval_pages_routed_means_no_authorize_warning(settings):
    """A host that uses no approvals (no django_wakes.urls included) is not nagged about AUTHORIZE."""
    settings.ROOT_URLCONF = "tests.urls_without_wakes"
    settings.WAKES = {**settings.WAKES, "AUTHORIZE": None}
    assert check_wakes_settings() == []


@pytest.mark.parametrize("name", ["MAX_ATTEMPTS", "BATCH", "INTENT_MAX_BYTES"])
@pytest.mark.parametrize("value", [0, -1, "5", 2.5, True])
def test_a_count_that_is_not_a_positive_integer_is_an_error(settings, name, value):
    settings.WAKES = {**settings.WAKES, name: value}
    messages = check_wakes_settings()
    assert ids(messages) == ["django_wakes.E003"] and name in messages[0].msg


def test_bad_gc_after_is_an_error_and_none_disables_gc(settings):
    settings.WAKES = {**settings.WAKES, "GC_AFTER": "a month"}
    assert ids(check_wakes_settings()) == ["django_wakes.E001"]
    settings.WAKES = {**settings.WAKES, "GC_AFTER": None}
    assert check_wakes_settings() == []


@pytest.mark.parametrize(
    "backoff",
    ["10s", {"BASE": "10s", "JITTER": 1}, {"FACTOR": 0.5}, {"FACTOR": "2"}],
)
def test_a_malformed_backoff_is_an_error(settings, backoff):
    settings.WAKES = {**settings.WAKES, "BACKOFF": backoff}
    assert ids(check_wakes_settings()) == ["django_wakes.E004"]


def test_a_backoff_with_a_bad_duration_is_a_duration_error(settings):
    settings.WAKES = {**settings.WAKES, "BACKOFF": {"BASE": "soon"}}
    assert ids(check_wakes_settings()) == ["django_wakes.E001"]


@pytest.mark.parametrize(
    "sinks",
    [["a.b"], {"": "testproject.wakes.authorize"}, {"kind": "testproject.nowhere.sink"}, {"kind": 3}],
)
def test_bad_sinks_setting_is_an_error(settings, sinks):
    settings.WAKES = {**settings.WAKES, "SINKS": sinks}
    assert ids(check_wakes_settings()) == ["django_wakes.E005"]


@pytest.mark.parametrize("value", [0, -1, "1", None])
def test_bad_poll_interval_is_an_error(settings, value):
    settings.WAKES = {**settings.WAKES, "POLL_INTERVAL": value}
    assert ids(check_wakes_settings()) == ["django_wakes.E006"]


def test_a_hook_that_is_not_callable_is_an_error(settings):
    settings.WAKES = {**settings.WAKES, "AUTHORIZE": "testproject.settings.SECRET_KEY"}
    assert ids(check_wakes_settings()) == ["django_wakes.E002"]


# -- the login page a logged-out approver is sent to (W005, W006) ---------------------------------


def login_ids() -> list[str]:
    return ids(check_login_page())


def test_the_login_page_django_wakes_ships_passes(settings):
    settings.LOGIN_URL = "django_wakes:login"  # what the testproject and the README use
    assert login_ids() == []


def test_a_login_url_no_pattern_matches_warns(settings):
    settings.LOGIN_URL = "/accounts/login/"  # Django's default, with nothing routed there
    (warning,) = check_login_page()
    assert warning.id == "django_wakes.W005" and warning.level == checks.WARNING
    assert "'/accounts/login/'" in warning.msg and "404" in warning.msg
    assert 'LOGIN_URL = "django_wakes:login"' in warning.hint


def test_a_login_url_naming_no_pattern_warns(settings):
    settings.LOGIN_URL = "login"  # a URL name this URLconf does not have
    assert login_ids() == ["django_wakes.W005"]


def test_a_login_view_without_its_template_warns(settings):
    """The 500 a newcomer met: ``LoginView`` at LOGIN_URL and no ``registration/login.html`` anywhere."""
    settings.ROOT_URLCONF = "tests.urls_login_without_template"
    settings.LOGIN_URL = "/accounts/login/"
    (warning,) = check_login_page()
    assert warning.id == "django_wakes.W006"
    assert "'registration/login.html'" in warning.msg and "500" in warning.msg
    settings.LOGIN_URL = "login"  # the same view by its URL name
    assert login_ids() == ["django_wakes.W006"]


def test_a_login_view_given_a_template_that_exists_passes(settings):
    settings.ROOT_URLCONF = "tests.urls_login_without_template"
    settings.LOGIN_URL = "admin_login"  # LoginView.as_view(template_name="admin/login.html")
    assert login_ids() == []


def test_a_login_page_on_another_site_is_not_checked(settings):
    settings.LOGIN_URL = "https://sso.example.com/login"
    assert login_ids() == []


def test_no_approval_pages_routed_means_no_login_check(settings):
    settings.ROOT_URLCONF = "tests.urls_without_wakes"
    settings.LOGIN_URL = "/accounts/login/"
    assert login_ids() == []


def test_a_settings_module_without_root_urlconf_is_not_a_crash(settings):
    del settings.ROOT_URLCONF
    assert login_ids() == []


def test_the_login_check_runs_with_django_check(settings, capsys):
    settings.LOGIN_URL = "/nowhere/"
    messages = checks.run_checks(tags=[checks.Tags.urls])
    assert "django_wakes.W005" in ids(messages)


# -- the Tasks backend without a Tasks framework (E011) -------------------------------------------

#: Run ``manage.py check`` with the Tasks frameworks made unimportable the way Python documents it (a
#: ``None`` in ``sys.modules``: ``import`` raises ImportError and ``find_spec`` finds nothing): Django 5.2
#: without the ``[tasks]`` extra.
CHECK_WITHOUT_TASKS = """
import sys
if sys.argv[1] == "blocked":
    sys.modules["django_tasks"] = None
    sys.modules["django.tasks"] = None
from django.core.management import execute_from_command_line
execute_from_command_line(["manage.py", "check"])
"""


def run_check(mode: str) -> subprocess.CompletedProcess[str]:
    root = Path(__file__).resolve().parent.parent
    environment = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    return subprocess.run(  # noqa: S603 - our own interpreter on our own script
        [sys.executable, "-c", CHECK_WITHOUT_TASKS, mode],
        cwd=root,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_tasks_naming_the_backend_without_a_tasks_framework_is_an_error():
    blocked = run_check("blocked")
    assert blocked.returncode == 1, blocked.stdout + blocked.stderr
    assert "django_wakes.E011" in blocked.stderr
    assert "TASKS['default'] names 'django_wakes.tasks.WakesBackend'" in blocked.stderr
    assert "pip install 'django-wakes[tasks]'" in blocked.stderr
    installed = run_check("installed")
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "E011" not in installed.stderr


def test_no_tasks_setting_is_not_checked(settings):
    del settings.TASKS
    assert check_tasks_backend() == []


def test_a_read_database_that_is_no_alias_is_an_error(settings):
    settings.WAKES = {**settings.WAKES, "READ_DATABASE": "replica-typo"}
    messages = check_wakes_settings()
    assert ids(messages) == ["django_wakes.E012"] and "replica-typo" in messages[0].msg
    settings.WAKES = {**settings.WAKES, "READ_DATABASE": "default"}
    assert ids(check_wakes_settings()) == []


# -- checks never raise; ready() never raises; runwakes refuses what the checks report -------------

ODD_VALUES = [
    None,
    True,
    0,
    -1,
    2.5,
    float("nan"),
    float("inf"),
    "",
    "x",
    "nowhere.at.all",
    "testproject.broken_module.thing",
    b"bytes",
    [],
    ["a"],
    ("t",),
    {},
    {"x": 1},
    {1: 2},
    {"a": [object()]},
    object(),
]


@pytest.mark.parametrize("name", sorted(DEFAULTS))
@pytest.mark.parametrize("value", ODD_VALUES, ids=[repr(v)[:30] for v in ODD_VALUES])
def test_no_setting_value_makes_a_check_or_ready_raise(settings, name, value):
    """Whatever a setting holds: messages naming it, never a traceback (and ready() loads what it can)."""
    settings.WAKES = {**settings.WAKES, name: value}
    messages = check_wakes_settings()
    for message in messages:
        if message.is_serious():
            assert f"WAKES[{name!r}]" in message.msg, message
            assert message.id != "django_wakes.E015", message  # every setting has a check of its own
    registry.load_settings()  # what AppConfig.ready runs


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e300])
def test_a_poll_interval_or_backoff_factor_that_is_not_finite_is_an_error(settings, value):
    settings.WAKES = {**settings.WAKES, "POLL_INTERVAL": value}
    assert ids(check_wakes_settings()) == ["django_wakes.E006"]
    settings.WAKES = {**settings.WAKES, "POLL_INTERVAL": 1.0, "BACKOFF": {"FACTOR": value}}
    assert ids(check_wakes_settings()) == (["django_wakes.E004"] if value != 1e300 else [])


@pytest.mark.parametrize("value", [5, "LEASE=5m", ["LEASE"], object()])
def test_wakes_that_is_not_a_dict_is_one_error(settings, value):
    settings.WAKES = value
    (error,) = check_wakes_settings()
    assert error.id == "django_wakes.E013" and "WAKES must be a dict" in error.msg
    assert wakes_settings.lease == timedelta(seconds=15)  # the defaults, meanwhile
    registry.load_settings()


def test_a_sink_path_that_does_not_import_is_a_check_message_and_not_loaded(settings):
    settings.WAKES = {
        **settings.WAKES,
        "SINKS": {
            "t.missing": "testproject.nowhere.sink",
            "t.broken": "testproject.broken_module.sink",
            "t.fine": "testproject.wakes.print_intent",
            "session_turn": "testproject.wakes.print_intent",
        },
    }
    messages = check_wakes_settings()
    assert ids(messages) == ["django_wakes.E005"] * 3
    text = "\n".join(m.msg for m in messages)
    missing = "WAKES['SINKS']['t.missing'] is not a callable or an importable dotted path: 'testproject.nowhere.sink'"
    assert missing in text
    assert "ModuleNotFoundError" in text
    assert "WAKES['SINKS']['t.broken']" in text and "RuntimeError: testproject.broken_module refuses to load" in text
    assert "WAKES['SINKS']['session_turn']" in text and "built in" in text
    registry.load_settings()
    assert registry.get("t.fine") is not None
    assert registry.get("t.missing") is None and registry.get("t.broken") is None


def test_a_periodic_setting_that_cannot_be_booked_is_one_error(settings):
    settings.WAKES = {**settings.WAKES, "PERIODIC": [{"task": "testproject.nowhere.task", "cron": "* * * * *"}]}
    messages = [m for m in checks.run_checks() if m.id and m.id.startswith("django_wakes")]
    assert ids(messages) == ["django_wakes.E014"]
    assert "WAKES['PERIODIC'][0]" in messages[0].msg and "testproject.nowhere.task" in messages[0].msg


# -- as a host runs them: manage.py processes -----------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("command", [["check"], ["migrate"], ["runwakes", "--once"]])
def test_a_worker_settings_module_without_root_urlconf_runs_every_command(procs: Procs, command: list[str]):
    """Django allows settings without ROOT_URLCONF (a worker that serves no URLs); so must django-wakes."""
    done = procs.manage(*command, DJANGO_SETTINGS_MODULE="testproject.settings_worker")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "command", [["check"], ["migrate"], ["runwakes", "--once"], ["runwakes", "--once", "--skip-checks"]]
)
def test_a_bad_sink_path_is_one_message_naming_the_setting_and_the_value(procs: Procs, command: list[str]):
    done = procs.manage(*command, WAKES_TEST_SINKS=json.dumps({"t.report": "myapp.sinks.send_report"}))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "django_wakes.E005" in done.stderr
    assert "WAKES['SINKS']['t.report'] is not a callable or an importable dotted path: 'myapp.sinks.send_report'" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("name", "value", "check_id"),
    [
        ("MCP_ALLOWED_ORIGINS", "https://app.example.com", "django_wakes.E017"),
        ("MCP_ALLOWED_ORIGINS", ["app.example.com"], "django_wakes.E017"),
        ("MCP_ALLOWED_ORIGINS", ["https://app.example.com/path"], "django_wakes.E017"),
        ("MCP_ALLOWED_ORIGINS", [None], "django_wakes.E017"),
        ("MCP_AUTHORIZATION_SERVERS", ["auth.example.com"], "django_wakes.E018"),
        ("MCP_AUTHORIZATION_SERVERS", "https://auth.example.com", "django_wakes.E018"),
    ],
)
def test_bad_mcp_origins_and_authorization_servers(settings, name, value, check_id):
    settings.WAKES = {**settings.WAKES, name: value}
    assert ids(check_wakes_settings()) == [check_id]


def test_good_mcp_origins_and_authorization_servers(settings):
    settings.WAKES = {
        **settings.WAKES,
        "MCP_ALLOWED_ORIGINS": ["https://app.example.com", "http://localhost:5173/"],
        "MCP_AUTHORIZATION_SERVERS": ["https://auth.example.com/tenant/1"],
    }
    assert check_wakes_settings() == []
