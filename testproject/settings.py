"""Settings of the small project that demonstrates and tests django-wakes.

The database comes from ``DATABASE_URL`` (``sqlite:///path``, ``postgres://user@host:port/name``,
``mysql://user:password@host:port/name``); SQLite in the project folder by default.
"""

from __future__ import annotations

import json
import os
from importlib.util import find_spec
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "testproject-only-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",  # the admin's CSS, for runserver and the live server the browser tests use
    "django_wakes",
    "testproject",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "testproject.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
STATIC_URL = "static/"
# The approval page needs a logged-in user: the login page django-wakes ships (no template of our own).
LOGIN_URL = "django_wakes:login"


def database_from_url(url: str) -> dict:
    """Turn a ``DATABASE_URL`` into a ``DATABASES`` entry (stdlib only).

    PostgreSQL may name several hosts, libpq's way (``postgres://user@h1:p1,h2:p2/name?target_session_attrs=
    read-write``): ``HOST`` and ``PORT`` become the comma-separated lists libpq takes, and the query's
    other parameters go into ``OPTIONS`` (the HA tests reach a Patroni cluster this way).
    """
    parsed = urlparse(url)
    hosts = parsed.netloc.rsplit("@", 1)[-1]
    if "," in hosts:  # several hosts: urlparse cannot read their ports, so read them here
        pairs = [pair.rsplit(":", 1) if ":" in pair else [pair, ""] for pair in hosts.split(",")]
        single = url.replace(hosts, pairs[0][0] or "localhost", 1)
        config = database_from_url(single)
        config["HOST"] = ",".join(host for host, _ in pairs)
        config["PORT"] = ",".join(port for _, port in pairs)
        return config
    scheme = parsed.scheme.split("+")[0]
    options = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    if scheme == "sqlite":
        name = url.split(":///", 1)[1].split("?", 1)[0] if ":///" in url else ""
        return {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": name or str(BASE_DIR / "testproject.sqlite3"),
            # ?timeout=S: how long a writer waits for SQLite's lock (tests/test_commands.py shortens it)
            "OPTIONS": {"timeout": float(options.get("timeout", 30)), "transaction_mode": "IMMEDIATE"},
            "TEST": {"NAME": options.get("test_name") or str(BASE_DIR / ".test.sqlite3")},
        }
    engine = {
        "postgres": "django.db.backends.postgresql",
        "postgresql": "django.db.backends.postgresql",
        "mysql": "django.db.backends.mysql",
        "mariadb": "django.db.backends.mysql",
    }[scheme]
    config = {
        "ENGINE": engine,
        "NAME": unquote(parsed.path.lstrip("/")),
        "USER": unquote(parsed.username or ""),
        "PASSWORD": unquote(parsed.password or ""),
        "HOST": parsed.hostname or "",
        "PORT": str(parsed.port or ""),
        "CONN_MAX_AGE": 0,
        "OPTIONS": {},
        "TEST": {},
    }
    if engine.endswith("mysql"):
        config["OPTIONS"] = {"charset": "utf8mb4"}
        config["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}
    if "test_name" in options:
        config["TEST"]["NAME"] = options["test_name"]
    if engine.endswith("postgresql"):
        config["OPTIONS"].update({k: v for k, v in options.items() if k != "test_name"})
    return config


DATABASES = {
    "default": database_from_url(os.environ.get("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'testproject.sqlite3'}")
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

WAKES = {
    "SPAWN_TURN": "testproject.wakes.spawn_turn",
    "AUTHORIZE": "testproject.wakes.authorize",
    "LEASE": os.environ.get("WAKES_LEASE", "5m"),
}

# The agent tools over MCP (tests/test_mcp.py starts servers with WAKES_TEST_MCP=1): sessions by bearer token,
# approval links to testproject.wakes.on_approval.
if os.environ.get("WAKES_TEST_MCP"):
    WAKES.update(MCP_AUTH="testproject.wakes.mcp_auth", ON_APPROVAL="testproject.wakes.on_approval")
# tests/test_mcp_border.py: the origins and authorization servers the endpoint names (JSON lists), and a host
# error to provoke (no SPAWN_TURN).
for _name in ("MCP_ALLOWED_ORIGINS", "MCP_AUTHORIZATION_SERVERS"):
    if os.environ.get(f"WAKES_TEST_{_name}"):
        WAKES[_name] = json.loads(os.environ[f"WAKES_TEST_{_name}"])
if os.environ.get("WAKES_TEST_NO_SPAWN_TURN"):
    del WAKES["SPAWN_TURN"]

# Django's Tasks framework runs on django-wakes (testproject/tasks.py): django.tasks on Django 6, the
# django-tasks backport (an app) on Django 5.2. WAKES_TEST_PERIODIC (JSON) declares periodic tasks for
# the runner processes of tests/test_tasks_processes.py.
TASKS = {
    "default": {"BACKEND": "django_wakes.tasks.WakesBackend", "QUEUES": ["default", "emails", "reports"]},
}
if find_spec("django.tasks") is None and find_spec("django_tasks") is not None:
    INSTALLED_APPS.append("django_tasks")
if os.environ.get("WAKES_TEST_PERIODIC"):
    WAKES["PERIODIC"] = json.loads(os.environ["WAKES_TEST_PERIODIC"])
# WAKES_TEST_SINKS (JSON): WAKES["SINKS"] for the processes of tests/test_checks.py (a path that does not import).
if os.environ.get("WAKES_TEST_SINKS"):
    WAKES["SINKS"] = json.loads(os.environ["WAKES_TEST_SINKS"])

# WAKES_TEST_LIMITS (JSON): WAKES["LIMITS"] for the runner processes of tests/test_limits_processes.py.
if os.environ.get("WAKES_TEST_LIMITS"):
    WAKES["LIMITS"] = json.loads(os.environ["WAKES_TEST_LIMITS"])

# WAKES_PUSH_DATABASE_URL: "default" goes through a transaction pooler (PgBouncer), which LISTEN cannot
# use, so the runner LISTENs on this direct connection instead; Django needs server-side cursors off
# behind such a pooler (tests/test_pgbouncer.py).
if os.environ.get("WAKES_PUSH_DATABASE_URL"):
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    DATABASES["push"] = database_from_url(os.environ["WAKES_PUSH_DATABASE_URL"])
    WAKES["PUSH_DATABASE"] = "push"

# WAKES_TEST_OTEL_SPANS: this process exports its OpenTelemetry spans to that file (tests/test_tracing.py).
if os.environ.get("WAKES_TEST_OTEL_SPANS"):
    from testproject.otel import export_spans_to

    export_spans_to(os.environ["WAKES_TEST_OTEL_SPANS"])

# WAKES_READ_DATABASE_URL: a streaming replica of "default" that the console's wake list, dashboard and metrics
# read from (tests/test_ha.py points it at the Patroni standby).
if os.environ.get("WAKES_READ_DATABASE_URL"):
    DATABASES["replica"] = database_from_url(os.environ["WAKES_READ_DATABASE_URL"])
    DATABASES["replica"]["TEST"] = {"MIRROR": "default"}
    WAKES["READ_DATABASE"] = "replica"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": os.environ.get("WAKES_LOG_FORMAT", "plain")}
    },
    "loggers": {"django_wakes": {"handlers": ["console"], "level": os.environ.get("WAKES_LOG_LEVEL", "INFO")}},
}
if os.environ.get("WAKES_LOG_FORMAT") == "json":
    # docs/operations.md's JSON logging (tests/test_logs.py). Only when asked for: dictConfig builds every
    # formatter it is given, and python-json-logger is a dev dependency (`make demo` installs none of them).
    LOGGING["formatters"]["json"] = {
        "()": "pythonjsonlogger.json.JsonFormatter",
        "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
        "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
    }
# A broken host log handler that raises SystemExit in the runner's fire threads (tests/test_sink_exits.py).
if os.environ.get("WAKES_TEST_BREAK_FIRE_LOGGING") == "1":
    LOGGING["handlers"]["breaks"] = {"class": "testproject.log_handlers.RaisingInFireThreads"}
    LOGGING["loggers"]["django_wakes"]["handlers"].append("breaks")
