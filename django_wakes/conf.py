"""The ``WAKES`` settings dict, read lazily on every access so ``override_settings`` works.

Defaults (every key optional)::

    WAKES = {
        "LEASE": "15s",           # a claim's lease, renewed by a heartbeat every LEASE/3; a killed
                                  # runner's wakes are re-driven within LEASE + POLL_INTERVAL
        "MAX_ATTEMPTS": 5,        # default max_attempts of a new wake; then it goes `dead`
        "BACKOFF": {"BASE": "10s", "FACTOR": 2.0, "MAX": "1h"},   # retry delay after a failure
        "INTENT_MAX_BYTES": 65536,   # JSON size limit for intent, payload and answer
        "SPAWN_TURN": None,       # dotted path of fn(session_id, result[, *, workspace_id]): kind "session_turn"
        "AUTHORIZE": None,        # dotted path of fn(actor, workspace_id) -> bool for resolve()
        "SINKS": {},              # kind -> dotted path of fn(wake, result), registered at start-up
        "ONCE_WAIT": "30s",       # how long once() waits for a concurrent caller before OnceInProgress
        "ONCE_LEASE": "5m",       # how long a once() receipt counts as in progress without a heartbeat
        "BATCH": 100,             # wakes claimed per pass by default
        "GC_AFTER": "30d",        # terminal rows older than this are deleted by gc (None: never)
        "POLL_INTERVAL": 1.0,     # seconds between runner passes at most (the backstop)
        "RUNNER_DB_TIMEOUT": "30s",  # runners' client-side network timeouts (None: leave the driver's)
        "PUSH_DATABASE": None,    # alias LISTEN uses (a direct connection when "default" is a pooler)
        "READ_DATABASE": None,    # alias the console's read-only pages (wake list, dashboard, metrics) read
                                  # from, e.g. a streaming replica; writes and operator actions never use it
        "RETAIN_MAX": 1000,       # retained events kept per workspace (deliver_event(retain=...)); oldest go
        "PAST_AT_LIMIT": "1d",    # schedule(at=...) refuses a time further in the past than this (None: any)
        "BUDGETS": {...},         # limits on wakes made for agents (budget=True, and django_wakes.agents.tools):
                                  # see BUDGET_DEFAULTS; a limit set to None is off
        "SESSION_BUSY": None,     # dotted path of fn(session_id[, *, workspace_id]) -> bool: a busy turn waits
        "BUSY_RETRY": "2s",       # how soon a session_turn wake deferred for a busy session is looked at again
        "WEBHOOKS": {},           # source -> {"SECRETS": [...], "SCHEME": "wakes", "WORKSPACE": None, "MAP": None,
                                  # "MAX_BYTES": 262144}: the signed event webhook events/<source>/ for our own,
                                  # Standard Webhooks, GitHub and Stripe senders (docs/events.md); none by default
        "API_AUTH": None,         # dotted path of fn(request) -> actor | None for the JSON approval API
                                  # (None: the session user, CSRF-protected)
        "METRICS_TOKENS": [],     # bearer tokens a Prometheus scraper may send to metrics/ (staff who may
                                  # view wakes can always read it); several for rotation (docs/operations.md)
        "PERIODIC": [],           # periodic tasks: [{"task": "dotted.path", "cron": ..., ...}] (docs/tasks.md)
        "ON_APPROVAL": None,      # dotted path of fn(wake, token): where the agent tools' approval tokens go
                                  # when dispatch() is given no on_approval (always, for the MCP server)
        "MCP_AUTH": None,         # dotted path of fn(request) -> (workspace_id, session_id) | None: who calls
                                  # the MCP endpoint mcp/ (None: the endpoint answers 404) (docs/agents.md)
        "LIMITS": {},             # limit_key (or "prefix:*") -> {"concurrency": N, "rate": "N/<duration>"}:
                                  # at most N firing at once / started per period, per key (engine/limit_rules.py)
        "WORKSPACE_LIMIT": None,  # the same limits for each workspace: a dict, or the dotted path of
                                  # fn(workspace_id) -> dict | None
        "WORKSPACE_WEIGHTS": {},  # {workspace_id: weight} or dotted path of fn(workspace_id) -> weight > 0:
                                  # a workspace's share of a busy runner's claims (default 1 each; README)
        "MCP_ALLOWED_ORIGINS": [],  # origins besides this host's that may call mcp/ ("https://app.example")
        "MCP_AUTHORIZATION_SERVERS": [],  # OAuth authorization servers the MCP metadata names (RFC 9728)
        "LOGIN_THROTTLE": {...},  # the login page's throttle: see LOGIN_THROTTLE_DEFAULTS; None turns it off
    }
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from .durations import parse_duration

DEFAULTS: dict[str, Any] = {
    "LEASE": "15s",
    "MAX_ATTEMPTS": 5,
    "BACKOFF": {"BASE": "10s", "FACTOR": 2.0, "MAX": "1h"},
    "INTENT_MAX_BYTES": 64 * 1024,
    "SPAWN_TURN": None,
    "AUTHORIZE": None,
    "SINKS": {},
    "ONCE_WAIT": "30s",
    "ONCE_LEASE": "5m",
    "BATCH": 100,
    "GC_AFTER": "30d",
    "POLL_INTERVAL": 1.0,
    "RUNNER_DB_TIMEOUT": "30s",
    "PUSH_DATABASE": None,
    "READ_DATABASE": None,
    "RETAIN_MAX": 1000,
    "PAST_AT_LIMIT": "1d",
    "BUDGETS": {},
    "SESSION_BUSY": None,
    "BUSY_RETRY": "2s",
    "WEBHOOKS": {},
    "API_AUTH": None,
    "METRICS_TOKENS": [],
    "PERIODIC": [],
    "ON_APPROVAL": None,
    "MCP_AUTH": None,
    "LIMITS": {},
    "WORKSPACE_LIMIT": None,
    "WORKSPACE_WEIGHTS": {},
    "MCP_ALLOWED_ORIGINS": [],
    "MCP_AUTHORIZATION_SERVERS": [],
    "LOGIN_THROTTLE": {},
}

#: The shipped login page's throttle (``WAKES["LOGIN_THROTTLE"]`` overrides any key; ``None`` turns it off):
#: after this many failed logins for one username, or from one address, within WINDOW, logins are refused
#: (429) until the window ends. Counted in Django's cache CACHE (shared by every worker only if it is).
LOGIN_THROTTLE_DEFAULTS: dict[str, Any] = {
    "PER_USER": 5,
    "PER_ADDRESS": 20,
    "WINDOW": "15m",
    "CACHE": "default",
}


#: The agent budgets (``WAKES["BUDGETS"]`` overrides any of them; ``None`` turns one off).
BUDGET_DEFAULTS: dict[str, Any] = {
    "SESSION_MAX_LIVE": 20,  # live (pending or firing) wakes of one session
    "SESSION_MIN_DELAY": "10s",  # a timed wake fires no sooner than this
    "SESSION_MAX_HORIZON": "90d",  # ... and no later
    "SESSION_COOLDOWN": None,  # least time between two agent-made wakes of one session
    "WORKSPACE_MAX_LIVE": 10_000,  # live wakes of one workspace
    "CHAIN_MAX_DEPTH": 10,  # a wake made by a sink while another fires is one deeper
}


def _hook(value: Any) -> Callable[..., Any] | None:
    if value is None or callable(value):
        return value  # type: ignore[no-any-return]  # a settings value: None or a callable
    hook: Callable[..., Any] = import_string(value)
    return hook


@functools.lru_cache(maxsize=64)
def takes_workspace(hook: Callable[..., Any]) -> bool:
    """Whether a session hook can be told the workspace: it has a parameter named ``workspace_id``.

    ``SPAWN_TURN`` and ``SESSION_BUSY`` are called with ``workspace_id=`` when they take it, so a
    multi-tenant host knows whose session ``s`` it is; a hook written for one workspace keeps its
    ``(session_id, ...)`` signature and is called as before. Only the name counts: a ``**kwargs``
    hook is often a forwarder (``task.delay(*args, **kwargs)``) to a function that takes no
    ``workspace_id``, which would then fail where nobody sees it (on a task queue).
    """
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable without a signature: call it as before
        return False
    return any(p.name == "workspace_id" and p.kind is not p.POSITIONAL_ONLY for p in parameters)


def call_session_hook(hook: Callable[..., Any], *args: Any, workspace_id: str) -> Any:
    """Call ``hook(*args)``, adding ``workspace_id=`` when it takes it (:func:`takes_workspace`)."""
    try:
        told = takes_workspace(hook)
    except TypeError:  # an unhashable callable object: not cached
        told = takes_workspace.__wrapped__(hook)
    if told:
        return hook(*args, workspace_id=workspace_id)
    return hook(*args)


class WakesSettings:
    """Typed, lazy view of ``settings.WAKES``."""

    def get(self, key: str) -> Any:
        """The value of ``WAKES[key]``, or its default (also when ``WAKES`` is not a dict: check E013 says so)."""
        user = getattr(settings, "WAKES", None)
        if isinstance(user, dict) and key in user:
            return user[key]
        return DEFAULTS[key]

    @property
    def lease(self) -> timedelta:
        return parse_duration(self.get("LEASE"), name="WAKES['LEASE']", allow_zero=False)

    @property
    def max_attempts(self) -> int:
        return int(self.get("MAX_ATTEMPTS"))

    @property
    def backoff_base(self) -> timedelta:
        return parse_duration({**DEFAULTS["BACKOFF"], **self.get("BACKOFF")}["BASE"], name="BACKOFF.BASE")

    @property
    def backoff_factor(self) -> float:
        return float({**DEFAULTS["BACKOFF"], **self.get("BACKOFF")}["FACTOR"])

    @property
    def backoff_max(self) -> timedelta:
        return parse_duration({**DEFAULTS["BACKOFF"], **self.get("BACKOFF")}["MAX"], name="BACKOFF.MAX")

    @property
    def intent_max_bytes(self) -> int:
        return int(self.get("INTENT_MAX_BYTES"))

    @property
    def spawn_turn(self) -> Callable[..., Any] | None:
        return _hook(self.get("SPAWN_TURN"))

    @property
    def authorize(self) -> Callable[..., Any] | None:
        return _hook(self.get("AUTHORIZE"))

    @property
    def sinks(self) -> dict[str, Any]:
        return dict(self.get("SINKS"))

    @property
    def once_wait(self) -> timedelta:
        return parse_duration(self.get("ONCE_WAIT"), name="WAKES['ONCE_WAIT']")

    @property
    def once_lease(self) -> timedelta:
        return parse_duration(self.get("ONCE_LEASE"), name="WAKES['ONCE_LEASE']", allow_zero=False)

    @property
    def batch(self) -> int:
        return int(self.get("BATCH"))

    @property
    def gc_after(self) -> timedelta | None:
        value = self.get("GC_AFTER")
        return None if value is None else parse_duration(value, name="WAKES['GC_AFTER']")

    @property
    def past_at_limit(self) -> timedelta | None:
        value = self.get("PAST_AT_LIMIT")
        return None if value is None else parse_duration(value, name="WAKES['PAST_AT_LIMIT']")

    @property
    def poll_interval(self) -> float:
        return float(self.get("POLL_INTERVAL"))

    @property
    def runner_db_timeout(self) -> timedelta | None:
        value = self.get("RUNNER_DB_TIMEOUT")
        return None if value is None else parse_duration(value, name="WAKES['RUNNER_DB_TIMEOUT']", allow_zero=False)

    @property
    def budgets(self) -> dict[str, Any]:
        return {**BUDGET_DEFAULTS, **(self.get("BUDGETS") or {})}

    @property
    def session_busy(self) -> Callable[..., Any] | None:
        return _hook(self.get("SESSION_BUSY"))

    @property
    def busy_retry(self) -> timedelta:
        return parse_duration(self.get("BUSY_RETRY"), name="WAKES['BUSY_RETRY']", allow_zero=False)

    @property
    def retain_max(self) -> int:
        return int(self.get("RETAIN_MAX"))

    @property
    def push_database(self) -> str | None:
        value = self.get("PUSH_DATABASE")
        return None if value is None else str(value)

    @property
    def read_database(self) -> str | None:
        value = self.get("READ_DATABASE")
        return None if value is None else str(value)

    @property
    def webhooks(self) -> dict[str, dict[str, Any]]:
        """Source -> its settings (``SECRETS``, ``SCHEME``, ``WORKSPACE``, ``MAP``, ...): :mod:`.web.webhooks`."""
        return dict(self.get("WEBHOOKS") or {})

    @property
    def api_auth(self) -> Callable[..., Any] | None:
        return _hook(self.get("API_AUTH"))

    @property
    def on_approval(self) -> Callable[..., Any] | None:
        return _hook(self.get("ON_APPROVAL"))

    @property
    def mcp_auth(self) -> Callable[..., Any] | None:
        return _hook(self.get("MCP_AUTH"))

    @property
    def mcp_allowed_origins(self) -> list[str]:
        return list(self.get("MCP_ALLOWED_ORIGINS") or [])

    @property
    def mcp_authorization_servers(self) -> list[str]:
        return list(self.get("MCP_AUTHORIZATION_SERVERS") or [])

    @property
    def login_throttle(self) -> dict[str, Any] | None:
        """The login throttle's settings, defaults filled in; ``None`` when ``WAKES["LOGIN_THROTTLE"]`` is ``None``."""
        value = self.get("LOGIN_THROTTLE")
        if value is None:
            return None
        return {**LOGIN_THROTTLE_DEFAULTS, **value}

    @property
    def metrics_tokens(self) -> list[str]:
        """The bearer tokens the metrics endpoint accepts (``django_wakes.console.metrics``); none by default."""
        return list(self.get("METRICS_TOKENS") or [])

    @property
    def workspace_weights(self) -> Callable[[str], Any]:
        """``weight(workspace_id)``: from the dict (1 for a workspace it does not name) or the dotted path."""
        value = self.get("WORKSPACE_WEIGHTS")
        if isinstance(value, dict):
            return lambda workspace_id: value.get(workspace_id, 1)
        hook = _hook(value)
        return hook if hook is not None else (lambda workspace_id: 1)

    def backoff(self, attempts: int) -> timedelta:
        """Return the delay before retry number ``attempts`` (1-based), capped at ``BACKOFF.MAX``."""
        cap = self.backoff_max.total_seconds()
        try:
            delay = self.backoff_base.total_seconds() * (self.backoff_factor ** max(attempts - 1, 0))
        except OverflowError:
            delay = cap
        return timedelta(seconds=min(delay, cap))


wakes_settings = WakesSettings()
