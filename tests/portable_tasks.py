"""A task declared with django-wakes' options through ``django_wakes.tasks.task`` (tests/test_mistakes.py).

Imported once under ``WakesBackend`` and once under the framework's immediate backend, as a project's
task module is under its own settings and under test settings that point ``TASKS`` elsewhere.
"""

from __future__ import annotations

from django_wakes.tasks import task


@task(max_attempts=3, backoff="30s", serial_key="user:{user_id}", limit_key="crm:{user_id}")
def double(user_id: int) -> int:
    return user_id * 2
