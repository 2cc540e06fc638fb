"""Minimal Django settings for the django-tasks-db peer (``db_worker``), on its own database.

On Django 5.2 the ``django.tasks`` API comes from the ``django-tasks`` backport (the
``django-tasks-db[compat]`` extra); Django 6 has it built in. Only ``benchmarks/.env`` has these.
"""

import importlib.util
import os

from testproject.settings import database_from_url

SECRET_KEY = "benchmark-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
INSTALLED_APPS = ["django_tasks_db"]
if importlib.util.find_spec("django.tasks") is None:
    INSTALLED_APPS.insert(0, "django_tasks")
# Persistent connections: with Django's default CONN_MAX_AGE=0, db_worker reconnects for every task
# (~3.5x slower); no one would run it that way in production.
DATABASES = {"default": {**database_from_url(os.environ["DATABASE_URL"]), "CONN_MAX_AGE": None}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
