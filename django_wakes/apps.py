"""App configuration: wire sinks and checks at start-up, never touch the database here."""

from __future__ import annotations

from django.apps import AppConfig
from django.utils.module_loading import autodiscover_modules
from django.utils.translation import gettext_lazy as _


class WakesConfig(AppConfig):
    name = "django_wakes"
    verbose_name = _("Wakes")
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks, tasks  # noqa: F401  (checks registers the system checks)
        from .engine import notify
        from .sinks import registry

        notify.connect()

        registry.load_settings()
        if tasks.framework_available():  # Django 6, or the django-tasks backport: tasks are wakes of this kind
            from .tasks.sink import register as register_task_sink

            register_task_sink()
        autodiscover_modules("wakes")
