"""System checks: every ``WAKES`` setting validated at start-up, one check id per problem.

| id | problem |
| --- | --- |
| E001 | a duration (LEASE, ONCE_WAIT, ONCE_LEASE, GC_AFTER, RUNNER_DB_TIMEOUT, PAST_AT_LIMIT, BACKOFF) is not valid |
| E002 | a hook (SPAWN_TURN, AUTHORIZE, SESSION_BUSY, API_AUTH, ON_APPROVAL, MCP_AUTH) is no callable or dotted path |
| E003 | a count (MAX_ATTEMPTS, BATCH, INTENT_MAX_BYTES, RETAIN_MAX) is not a positive integer |
| E004 | BACKOFF is not a dict of BASE, FACTOR (a number >= 1) and MAX |
| E005 | SINKS is not a dict of kind -> callable or importable dotted path |
| E006 | POLL_INTERVAL is not a positive number of seconds |
| E007 | PUSH_DATABASE names no alias in DATABASES |
| E009 | BUDGETS is not a dict of known limits, each None, a whole number or a duration |
| E008 | WEBHOOKS is not a dict of source -> {SECRETS: non-empty strings the SCHEME can use, SCHEME: known, |
|      | WORKSPACE: a workspace id, MAP: importable (required by "github" and "stripe"), MAX_BYTES: positive int, |
|      | MAX_DELIVERIES: positive int, PER: a duration from 1 s to 30 days} |
| E010 | METRICS_TOKENS is not a list of strings of at least 32 characters, each without whitespace |
| E012 | READ_DATABASE names no alias in DATABASES |
| E013 | WAKES is not a dict |
| E014 | PERIODIC is not a list of periodic task entries, or names a task that cannot be imported |
| E015 | checking a setting failed unexpectedly (the message names the setting and the error) |
| E017 | MCP_ALLOWED_ORIGINS is not a list of origins (``"https://app.example.com"``: scheme, host, port only) |
| E018 | MCP_AUTHORIZATION_SERVERS is not a list of absolute http(s) URLs |
| E019 | LOGIN_THROTTLE is not None nor a dict of PER_USER/PER_ADDRESS (None or int > 0), WINDOW, CACHE (alias) |
| E020 | LIMITS is not a dict of key or ``prefix:*`` -> {concurrency: positive int, rate: "N/<duration>"} |
| E021 | WORKSPACE_LIMIT is neither such a dict nor the dotted path of fn(workspace_id) -> dict or None |
| E022 | WORKSPACE_WEIGHTS is not a dict of workspace id -> positive finite number, nor a callable or dotted path |
| W001 | the approval pages are in the URLconf but AUTHORIZE is not set: no one could answer |
| W002 | SPAWN_TURN is not set: the default kind ``session_turn`` cannot be created |
| W003 | an unknown key in WAKES (a typo would otherwise be silently ignored) |
| W004 | a WEBHOOKS source with neither WORKSPACE nor MAP: the body names the workspace (its secret opens them all) |

Beyond ``WAKES`` (each in a function of its own):

| id | problem |
| --- | --- |
| W005 | the approval pages are routed but LOGIN_URL leads to no URL pattern: an approver's first click is a 404 |
| W006 | LOGIN_URL's view renders a template that does not exist (a bare ``LoginView``): a 500 |
| E011 | TASKS names ``WakesBackend`` but no Tasks framework imports (Django 5.2 without ``[tasks]``) |
| E016 | ``check --database <alias>``: django-wakes' migrations are not all applied there (run ``migrate``) |

A check never raises: whatever a setting holds, the result is messages (``manage.py check`` exits
non-zero on an error, and ``runwakes`` refuses to start with it), never a traceback. ``AppConfig.ready``
skips what it cannot load (a ``SINKS`` entry that does not import) and leaves the reporting to these checks.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import router
from django.shortcuts import resolve_url
from django.urls import NoReverseMatch, Resolver404, get_script_prefix, resolve, reverse
from django.utils.module_loading import import_string

from .conf import BUDGET_DEFAULTS, DEFAULTS, wakes_settings
from .durations import parse_duration
from .exceptions import InvalidDuration, InvalidWake
from .sinks import SESSION_TURN
from .validation import key

#: Duration settings and whether zero is allowed (a zero lease would make every claim lapse at once).
DURATIONS = {
    "LEASE": False,
    "ONCE_WAIT": True,
    "ONCE_LEASE": False,
    "GC_AFTER": True,
    "RUNNER_DB_TIMEOUT": False,
    "BUSY_RETRY": False,
    "PAST_AT_LIMIT": True,
}
#: Duration settings where None is a documented value (GC_AFTER: never gc; RUNNER_DB_TIMEOUT: the driver's;
#: PAST_AT_LIMIT: any past time is accepted).
NULLABLE = ("GC_AFTER", "RUNNER_DB_TIMEOUT", "PAST_AT_LIMIT")
POSITIVE_INTS = ("MAX_ATTEMPTS", "BATCH", "INTENT_MAX_BYTES", "RETAIN_MAX")
HOOKS = ("SPAWN_TURN", "AUTHORIZE", "SESSION_BUSY", "API_AUTH", "ON_APPROVAL", "MCP_AUTH")


@register(Tags.compatibility)
def check_wakes_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    user = getattr(settings, "WAKES", None)
    if user is not None and not isinstance(user, dict):
        return [
            Error(f"WAKES must be a dict of settings, got {type(user).__name__}: {user!r:.100}", id="django_wakes.E013")
        ]
    return _reported(
        [
            ("WAKES", _unknown_keys),
            ("WAKES['LEASE'] and the other durations", _durations),
            ("WAKES['SPAWN_TURN'] and the other hooks", _hooks),
            ("WAKES['BATCH'] and the other counts", _counts),
            ("WAKES['BACKOFF']", _backoff),
            ("WAKES['SINKS']", _sinks),
            ("WAKES['POLL_INTERVAL']", _poll_interval),
            ("WAKES['PUSH_DATABASE']", _push_database),
            ("WAKES['READ_DATABASE']", _read_database),
            ("WAKES['BUDGETS']", _budgets),
            ("WAKES['WEBHOOKS']", _webhooks),
            ("WAKES['METRICS_TOKENS']", _metrics_tokens),
            ("WAKES['PERIODIC']", _periodic),
            ("WAKES['LIMITS'] and WAKES['WORKSPACE_LIMIT']", _limits),
            ("WAKES['WORKSPACE_WEIGHTS']", _workspace_weights),
            ("WAKES['MCP_ALLOWED_ORIGINS'] and WAKES['MCP_AUTHORIZATION_SERVERS']", _mcp_urls),
            ("WAKES['LOGIN_THROTTLE']", _login_throttle),
            ("WAKES['AUTHORIZE'] and WAKES['SPAWN_TURN']", _missing_hooks),
        ]
    )


def _reported(sections: list[tuple[str, Callable[[], Iterator[CheckMessage]]]]) -> list[CheckMessage]:
    """Run each section's checks; one that raises becomes an E015 naming what it checked, never a traceback."""
    messages: list[CheckMessage] = []
    for names, section in sections:
        try:
            messages.extend(section())
        except Exception as exc:  # noqa: BLE001 - a check reports, it never raises
            messages.append(
                Error(f"checking {names} failed: {type(exc).__name__}: {exc!s:.200}", id="django_wakes.E015")
            )
    return messages


def setting_errors() -> list[CheckMessage]:
    """The error-level messages of :func:`check_wakes_settings`: what ``runwakes`` refuses to start with."""
    return [message for message in check_wakes_settings() if message.is_serious()]


def _unknown_keys() -> Iterator[CheckMessage]:
    user = set(getattr(settings, "WAKES", None) or {})
    for name in sorted(user - set(DEFAULTS), key=repr):
        yield Warning(f"WAKES[{name!r}] is not a django-wakes setting", id="django_wakes.W003")


def _duration_error(value: Any, name: str, *, allow_zero: bool) -> CheckMessage | None:
    try:
        parse_duration(value, name=name, allow_zero=allow_zero)
    except InvalidDuration as exc:
        return Error(str(exc), id="django_wakes.E001")
    return None


def _durations() -> Iterator[CheckMessage]:
    for name, allow_zero in DURATIONS.items():
        value = wakes_settings.get(name)
        if name in NULLABLE and value is None:
            continue
        error = _duration_error(value, f"WAKES[{name!r}]", allow_zero=allow_zero)
        if error is not None:
            yield error


def _import_problem(value: Any) -> str | None:
    """Why ``value`` is not a callable or the dotted path of one (``None``: it is)."""
    if callable(value):
        return None
    if not isinstance(value, str):
        return f"a {type(value).__name__} is neither a callable nor a dotted path"
    try:
        found = import_string(value)
    except Exception as exc:  # noqa: BLE001 - ImportError, or whatever the module raised as it was imported
        return f"{type(exc).__name__}: {exc!s:.200}"
    return None if callable(found) else f"it is a {type(found).__name__}, not a callable"


def _importable(value: Any) -> bool:
    return _import_problem(value) is None


def _hooks() -> Iterator[CheckMessage]:
    for name in HOOKS:
        value = wakes_settings.get(name)
        problem = None if value is None else _import_problem(value)
        if problem is not None:
            yield Error(
                f"WAKES[{name!r}] cannot be imported as a callable: {value!r:.200} ({problem})",
                hint="Give a dotted path to a function, or the function itself.",
                id="django_wakes.E002",
            )


def _counts() -> Iterator[CheckMessage]:
    for name in POSITIVE_INTS:
        value = wakes_settings.get(name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            yield Error(f"WAKES[{name!r}] must be a positive integer, got {value!r}", id="django_wakes.E003")


def _backoff() -> Iterator[CheckMessage]:
    value = wakes_settings.get("BACKOFF")
    if not isinstance(value, dict) or set(value) - {"BASE", "FACTOR", "MAX"}:
        yield Error(f"WAKES['BACKOFF'] must be a dict with BASE, FACTOR and MAX, got {value!r}", id="django_wakes.E004")
        return
    merged = {**DEFAULTS["BACKOFF"], **value}
    factor = merged["FACTOR"]
    if isinstance(factor, bool) or not isinstance(factor, int | float) or not 1 <= factor < math.inf:
        yield Error(f"WAKES['BACKOFF']['FACTOR'] must be a number >= 1, got {factor!r}", id="django_wakes.E004")
    for part in ("BASE", "MAX"):
        error = _duration_error(merged[part], f"WAKES['BACKOFF'][{part!r}]", allow_zero=True)
        if error is not None:
            yield error


def _sinks() -> Iterator[CheckMessage]:
    value = wakes_settings.get("SINKS")
    if not isinstance(value, dict):
        yield Error(
            f"WAKES['SINKS'] must be a dict of kind -> sink, got {type(value).__name__}: {value!r:.100}",
            id="django_wakes.E005",
        )
        return
    for kind, target in value.items():
        if not isinstance(kind, str) or not kind:
            problem: str | None = "a kind must be a non-empty string"
        elif kind == SESSION_TURN:
            problem = "'session_turn' is built in: configure WAKES['SPAWN_TURN'] instead"
        else:
            problem = _import_problem(target)
        if problem is not None:
            yield Error(
                f"WAKES['SINKS'][{kind!r:.100}] is not a callable or an importable dotted path: {target!r:.200} "
                f"({problem})",
                id="django_wakes.E005",
            )


def _poll_interval() -> Iterator[CheckMessage]:
    value = wakes_settings.get("POLL_INTERVAL")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= threading.TIMEOUT_MAX:
        yield Error(
            f"WAKES['POLL_INTERVAL'] must be a positive number of seconds, got {value!r}", id="django_wakes.E006"
        )


def _budgets() -> Iterator[CheckMessage]:
    value = wakes_settings.get("BUDGETS")
    if not isinstance(value, dict) or set(value) - set(BUDGET_DEFAULTS):
        yield Error(
            f"WAKES['BUDGETS'] must be a dict with some of {', '.join(BUDGET_DEFAULTS)}, got {value!r:.200}",
            id="django_wakes.E009",
        )
        return
    for name, limit in value.items():
        if limit is None:
            continue
        if name in ("SESSION_MIN_DELAY", "SESSION_MAX_HORIZON", "SESSION_COOLDOWN"):
            error = _duration_error(limit, f"WAKES['BUDGETS'][{name!r}]", allow_zero=True)
            if error is not None:
                yield Error(error.msg, id="django_wakes.E009")
        elif isinstance(limit, bool) or not isinstance(limit, int) or limit < 0:
            yield Error(
                f"WAKES['BUDGETS'][{name!r}] must be a whole number >= 0 or None, got {limit!r:.60}",
                id="django_wakes.E009",
            )


def _database_alias(name: str, *, hint: str, check_id: str) -> Iterator[CheckMessage]:
    """``WAKES[name]``, when set, must be an alias in ``DATABASES`` (a string: a list would not even hash)."""
    value = wakes_settings.get(name)
    if value is not None and (not isinstance(value, str) or value not in settings.DATABASES):
        yield Error(f"WAKES[{name!r}] is {value!r}, which is not an alias in DATABASES", hint=hint, id=check_id)


def _push_database() -> Iterator[CheckMessage]:
    return _database_alias(
        "PUSH_DATABASE",
        hint="Name a DATABASES entry that connects to PostgreSQL directly (not through PgBouncer).",
        check_id="django_wakes.E007",
    )


def _read_database() -> Iterator[CheckMessage]:
    return _database_alias(
        "READ_DATABASE",
        hint="Name the DATABASES entry of a streaming replica of the database wakes are written to.",
        check_id="django_wakes.E012",
    )


def _webhook_error(message: str) -> CheckMessage:
    return Error(
        message,
        hint='Give WAKES["WEBHOOKS"] = {"source": {"SECRETS": ["..."], "SCHEME": "wakes", "WORKSPACE": "...", '
        '"MAP": "dotted.path", "MAX_BYTES": 65536}} (docs/events.md).',
        id="django_wakes.E008",
    )


def _webhooks() -> Iterator[CheckMessage]:
    """Validate WEBHOOKS; messages name the source and the key, never a secret's value."""
    from .web import delivery_limits
    from .web.webhook_schemes import DEFAULT_SCHEME, SCHEMES
    from .web.webhooks import SOURCE_KEYS, SOURCE_MAX_LENGTH

    value = wakes_settings.get("WEBHOOKS")
    if not isinstance(value, dict):
        yield _webhook_error(f"WAKES['WEBHOOKS'] must be a dict of source -> settings, got {type(value).__name__}")
        return
    for source, config in value.items():
        if not isinstance(source, str) or not source or "/" in source or len(source) > SOURCE_MAX_LENGTH:
            yield _webhook_error(
                f"WAKES['WEBHOOKS'] source {source!r:.60} must be a non-empty string without '/' of at most "
                f"{SOURCE_MAX_LENGTH} characters"
            )
            continue
        name = f"WAKES['WEBHOOKS'][{source!r}]"
        if not isinstance(config, dict):
            yield _webhook_error(f"{name} must be a dict with SECRETS, got {type(config).__name__}")
            continue
        for unknown in sorted(set(config) - SOURCE_KEYS, key=str):
            yield _webhook_error(f"{name} has an unknown key {unknown!r:.60}")
        scheme_name = config.get("SCHEME", DEFAULT_SCHEME)
        scheme = SCHEMES.get(scheme_name) if isinstance(scheme_name, str) else None
        if scheme is None:
            known = ", ".join(sorted(SCHEMES))
            yield _webhook_error(f"{name}['SCHEME'] must be one of {known}, got {scheme_name!r:.60}")
        secrets = config.get("SECRETS")
        if (
            not isinstance(secrets, list | tuple)
            or not secrets
            or not all(isinstance(secret, str) and secret for secret in secrets)
        ):
            yield _webhook_error(f"{name}['SECRETS'] must be a non-empty list of non-empty strings")
        elif scheme is not None:
            for index, secret in enumerate(secrets):
                problem = scheme.secret_problem(secret)
                if problem:
                    yield _webhook_error(f"{name}['SECRETS'][{index}] {problem} (scheme {scheme.name!r})")
        max_bytes = config.get("MAX_BYTES", 1)
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
            yield _webhook_error(f"{name}['MAX_BYTES'] must be a positive integer, got {max_bytes!r:.60}")
        for limit, read in (("MAX_DELIVERIES", delivery_limits.max_deliveries), ("PER", delivery_limits.per)):
            try:
                read(config.get(limit))
            except ValueError as exc:
                yield _webhook_error(f"{name}['{limit}'] {exc}")
        workspace = config.get("WORKSPACE")
        if workspace is not None:
            try:
                key(workspace, name=f"{name}['WORKSPACE']")
            except InvalidWake as exc:
                yield _webhook_error(str(exc))
        mapper = config.get("MAP")
        if mapper is not None and not _importable(mapper):
            yield _webhook_error(f"{name}['MAP'] cannot be imported as a callable: {mapper!r:.100}")
        if mapper is None and scheme is not None and scheme.needs_map:
            yield _webhook_error(
                f"{name} has SCHEME {scheme.name!r} but no MAP: its bodies are {scheme.name}'s own events, "
                "and MAP says which event key each one is"
            )
        elif mapper is None and workspace is None:
            yield Warning(
                f"{name} has neither WORKSPACE nor MAP: the body names the workspace, so whoever holds this "
                "source's secret can deliver events into any workspace",
                hint="Set WORKSPACE to pin the source to one workspace, or a MAP that decides it.",
                id="django_wakes.W004",
            )


def _metrics_tokens() -> Iterator[CheckMessage]:
    """Validate METRICS_TOKENS; a message names the token's position, never its value."""
    from .console.metrics import TOKEN_MIN_LENGTH

    value = wakes_settings.get("METRICS_TOKENS")
    hint = "Give a list of random strings (secrets.token_urlsafe(32)), kept out of the code: an environment variable."
    if not isinstance(value, list | tuple):
        yield Error(
            f"WAKES['METRICS_TOKENS'] must be a list of bearer tokens, got {type(value).__name__}",
            hint=hint,
            id="django_wakes.E010",
        )
        return
    for index, token in enumerate(value):
        if not isinstance(token, str) or len(token) < TOKEN_MIN_LENGTH or any(c.isspace() for c in token):
            yield Error(
                f"WAKES['METRICS_TOKENS'][{index}] must be a string of at least {TOKEN_MIN_LENGTH} characters "
                "without whitespace",
                hint=hint,
                id="django_wakes.E010",
            )


def _mcp_urls() -> Iterator[CheckMessage]:
    """E017/E018: the MCP endpoint's URL settings (``agents.mcp_server.url_setting_problems`` says what is wrong)."""
    from .agents.mcp_server import url_setting_problems

    for name, message in url_setting_problems():
        yield Error(message, id="django_wakes.E017" if name == "MCP_ALLOWED_ORIGINS" else "django_wakes.E018")


def _login_throttle() -> Iterator[CheckMessage]:
    """E019: LOGIN_THROTTLE (``web.login.throttle_problems`` says what is wrong)."""
    from .web.login import THROTTLE_HINT, throttle_problems

    for message in throttle_problems():
        yield Error(message, hint=THROTTLE_HINT, id="django_wakes.E019")


def _approval_pages_routed() -> bool:
    """Whether the project's URLconf includes the approval pages (``django_wakes.urls``).

    ``False`` without a ``ROOT_URLCONF`` (a worker-only settings module, which Django allows) and for
    a URLconf that does not load (Django's own URL checks report that one).
    """
    if not getattr(settings, "ROOT_URLCONF", None):
        return False
    try:
        reverse("django_wakes:approve", args=["probe"])
    except Exception:  # noqa: BLE001 - NoReverseMatch, or a URLconf that fails to import
        return False
    return True


def _periodic() -> Iterator[CheckMessage]:
    """Validate WAKES['PERIODIC'] (periodic tasks, django_wakes.tasks): its entries and their tasks."""
    value = wakes_settings.get("PERIODIC")
    if not value:
        return
    from .tasks import framework_available

    if not framework_available():
        yield Error(
            f"WAKES['PERIODIC'] declares periodic tasks, but no Tasks framework can be imported: {value!r:.100}",
            hint="Django 6 ships django.tasks; on Django 5.2: pip install 'django-wakes[tasks]'.",
            id="django_wakes.E014",
        )
        return
    from .tasks.periodic_tasks import from_settings

    try:
        from_settings()
    except Exception as exc:  # noqa: BLE001 - PeriodicTaskError, or whatever a task's module raised on import
        message = str(exc)
        if "WAKES['PERIODIC']" not in message:
            message = f"WAKES['PERIODIC'] {value!r:.100}: {type(exc).__name__}: {message}"
        yield Error(message[:400], hint="See docs/tasks.md, periodic tasks.", id="django_wakes.E014")


def _limits() -> Iterator[CheckMessage]:
    """Validate LIMITS and WORKSPACE_LIMIT (:mod:`django_wakes.engine.limit_rules`): each message names its entry."""
    from .engine.limit_rules import problems

    for setting, problem in problems():
        yield Error(
            problem,
            hint='e.g. WAKES["LIMITS"] = {"mailer": {"concurrency": 5, "rate": "100/1m"}, "crm:*": {"rate": "10/1s"}}',
            id="django_wakes.E020" if setting == "LIMITS" else "django_wakes.E021",
        )


def _workspace_weights() -> Iterator[CheckMessage]:
    """A dict of workspace ids to positive finite numbers, or a callable (or its dotted path)."""
    from .engine.fairness import bad_weights

    value = wakes_settings.get("WORKSPACE_WEIGHTS")
    problem = bad_weights(value) if isinstance(value, dict) else _import_problem(value)
    if problem is not None:
        yield Error(
            f"WAKES['WORKSPACE_WEIGHTS'] must map workspace ids to positive numbers or name a function: {problem}",
            hint="A dict {workspace_id: weight}, or the dotted path of weight(workspace_id) -> a number > 0.",
            id="django_wakes.E022",
        )


def _missing_hooks() -> Iterator[CheckMessage]:
    if not wakes_settings.get("AUTHORIZE") and _approval_pages_routed():
        yield Warning(
            "WAKES['AUTHORIZE'] is not set: approvals cannot be resolved by anyone",
            hint="Point it at a function (actor, workspace_id) -> bool.",
            id="django_wakes.W001",
        )
    if not wakes_settings.get("SPAWN_TURN"):
        yield Warning(
            "WAKES['SPAWN_TURN'] is not set: wakes of kind 'session_turn' (the default) cannot be created",
            hint="Point it at a function (session_id, result, *, workspace_id), or pass kind= for your own sinks.",
            id="django_wakes.W002",
        )


LOGIN_HINT = (
    'Set LOGIN_URL = "django_wakes:login" (the login page django-wakes ships with its URLs) or route a login view '
    "of your own at LOGIN_URL."
)


@register(Tags.urls)
def check_login_page(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """W005/W006: where a logged-out approver is sent must be a page that renders (only if approvals are routed)."""
    if not _approval_pages_routed():
        return []
    return _reported([("LOGIN_URL", _login_page)])


def _login_page() -> Iterator[CheckMessage]:
    configured = settings.LOGIN_URL
    try:
        url = str(resolve_url(configured))
    except NoReverseMatch:
        yield Warning(
            f"LOGIN_URL {configured!r} names no URL pattern: a logged-out approver's first click on an approval "
            "link fails",
            hint=LOGIN_HINT,
            id="django_wakes.W005",
        )
        return
    parts = urlsplit(url)
    if parts.scheme or parts.netloc:
        return  # a login page on another site (single sign-on): not this URLconf's to check
    prefix = get_script_prefix()
    path = "/" + parts.path[len(prefix) :] if prefix != "/" and parts.path.startswith(prefix) else parts.path
    try:
        match = resolve(path)
    except Resolver404:
        yield Warning(
            f"LOGIN_URL {configured!r} ({path}) matches no URL pattern: a logged-out approver's first click on an "
            "approval link is a 404",
            hint=LOGIN_HINT,
            id="django_wakes.W005",
        )
        return
    from .web.login import renders_template, template_loads

    template = renders_template(match.func)
    if template is not None and not template_loads(template):
        yield Warning(
            f"LOGIN_URL {configured!r} is served by a view whose template {template!r} does not exist: a logged-out "
            "approver's first click on an approval link is a 500 (TemplateDoesNotExist)",
            hint='Use LOGIN_URL = "django_wakes:login" (it ships its template), or give the view one: '
            'LoginView.as_view(template_name="admin/login.html") uses the admin\'s.',
            id="django_wakes.W006",
        )


#: The Tasks backend's dotted paths start so (``django_wakes.tasks.WakesBackend``, ``...tasks.backend.WakesBackend``).
TASKS_BACKEND_PREFIX = "django_wakes.tasks."


@register(Tags.compatibility)
def check_tasks_backend(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E011: a TASKS entry names the django-wakes backend, but no Tasks framework is installed to run it."""
    from .tasks import framework_available

    tasks = getattr(settings, "TASKS", None)
    if not isinstance(tasks, dict) or framework_available():
        return []
    return [
        Error(
            f"TASKS[{alias!r}] names {config['BACKEND']!r}, but no Tasks framework can be imported: "
            "Django 6 ships django.tasks; Django 5.2 needs the django-tasks backport",
            hint="pip install 'django-wakes[tasks]' and add \"django_tasks\" to INSTALLED_APPS (Django 5.2), "
            "or upgrade to Django 6.",
            id="django_wakes.E011",
        )
        for alias, config in tasks.items()
        if isinstance(config, dict) and str(config.get("BACKEND", "")).startswith(TASKS_BACKEND_PREFIX)
    ]


@register(Tags.database)
def check_migrated(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """E016: django-wakes' migrations are not all applied on a database ``check --database`` names.

    Like Django's own database checks it runs only when asked for databases; and it stays silent
    under ``manage.py migrate`` (which runs the database checks first), the command that fixes it.
    """
    from .engine.schema import not_migrated_message, unapplied_migrations
    from .models import Wake

    if not databases or sys.argv[1:2] == ["migrate"]:
        return []
    messages: list[CheckMessage] = []
    for alias in databases:
        if not router.allow_migrate_model(alias, Wake):
            continue
        missing = unapplied_migrations(alias)
        if missing:
            messages.append(Error(not_migrated_message(alias, missing), id="django_wakes.E016"))
    return messages
