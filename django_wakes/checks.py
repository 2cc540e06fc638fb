"""System checks: misconfigurations that would otherwise surface as wakes that never fire."""

from __future__ import annotations

from typing import Any

from django.core.checks import Error, Tags, Warning, register
from django.utils.module_loading import import_string

from .conf import DEFAULTS, wakes_settings
from .durations import parse_duration
from .exceptions import InvalidDuration


@register(Tags.compatibility)
def check_wakes_settings(app_configs: Any = None, **kwargs: Any) -> list[Any]:
    messages: list[Any] = []
    unknown = _user_keys() - set(DEFAULTS)
    for name in sorted(unknown):
        messages.append(Warning(f"WAKES[{name!r}] is not a django-wakes setting", id="django_wakes.W003"))
    for name in ("LEASE", "ONCE_WAIT", "ONCE_LEASE"):
        try:
            parse_duration(wakes_settings.get(name), name=name, allow_zero=name == "ONCE_WAIT")
        except InvalidDuration as exc:
            messages.append(Error(str(exc), id="django_wakes.E001"))
    for name in ("SPAWN_TURN", "AUTHORIZE"):
        value = wakes_settings.get(name)
        if isinstance(value, str):
            try:
                import_string(value)
            except ImportError as exc:
                messages.append(Error(f"WAKES[{name!r}] cannot be imported: {exc}", id="django_wakes.E002"))
    if not wakes_settings.get("AUTHORIZE"):
        messages.append(
            Warning(
                "WAKES['AUTHORIZE'] is not set: approvals cannot be resolved by anyone",
                hint="Point it at a function (actor, workspace_id) -> bool.",
                id="django_wakes.W001",
            )
        )
    if not wakes_settings.get("SPAWN_TURN"):
        messages.append(
            Warning(
                "WAKES['SPAWN_TURN'] is not set: wakes of kind 'session_turn' (the default) cannot be created",
                hint="Point it at a function (session_id, result), or always pass kind= for your own sinks.",
                id="django_wakes.W002",
            )
        )
    return messages


def _user_keys() -> set[str]:
    from django.conf import settings

    return set(getattr(settings, "WAKES", None) or {})
