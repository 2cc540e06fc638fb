"""``InstantField``: a point in time that is an aware UTC ``datetime`` in Python, whatever ``USE_TZ`` says.

Every time the engine keeps is an instant it compares with ``clock.now()`` (aware UTC). Django's
``DateTimeField`` follows ``USE_TZ``: with ``USE_TZ = False`` SQLite and MariaDB refuse an aware
value ("does not support timezone-aware datetimes when USE_TZ is False") and PostgreSQL hands back
naive local times, which then cannot be compared with aware ones. This field keeps the engine's
view the same in both worlds:

* written: an aware value goes to a database without time zone support (SQLite, MySQL/MariaDB) as
  naive UTC when ``USE_TZ = False`` (PostgreSQL's ``timestamptz`` takes the aware value as it is);
* read: a naive value is made aware again: as UTC on SQLite and MariaDB, and on PostgreSQL in the
  connection's time zone (``TIME_ZONE``, which Django gives PostgreSQL sessions when ``USE_TZ = False``;
  an hour repeated by a DST change there is read as its first occurrence: use ``TIME_ZONE = "UTC"``
  with ``USE_TZ = False`` to avoid that hour).

With ``USE_TZ = True`` it is exactly a ``DateTimeField`` (no extra call per value read). In the
database it is one too: the same column, and :meth:`deconstruct` names ``DateTimeField``, so
migrations see no difference.
"""

from __future__ import annotations

import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from django.conf import settings
from django.db import models

#: The length of every key column (workspace, session, lane, event and idempotency keys, ...).
KEY_LENGTH = 200

_ST = TypeVar("_ST", contravariant=True)
_GT = TypeVar("_GT", covariant=True)

if TYPE_CHECKING:  # django-stubs makes fields generic (set and get types) for the type checker only
    _DateTimeField = models.DateTimeField
else:

    class _DateTimeField(models.DateTimeField):
        """Django's field, subscriptable as the stubs declare it (``InstantField[...]`` below), nothing more."""

        def __class_getitem__(cls, _params: Any) -> type:
            return cls


class InstantField(_DateTimeField[_ST, _GT]):
    """A ``DateTimeField`` that reads and writes aware UTC datetimes with ``USE_TZ`` on or off."""

    def get_db_prep_value(self, value: Any, connection: Any, prepared: bool = False) -> Any:
        if not prepared:
            value = self.get_prep_value(value)
        if (
            isinstance(value, datetime)
            and value.utcoffset() is not None
            and not settings.USE_TZ
            and not connection.features.supports_timezones
        ):
            value = value.astimezone(UTC).replace(tzinfo=None)
        return connection.ops.adapt_datetimefield_value(value)

    def get_db_converters(self, connection: Any) -> list[Callable[..., Any]]:
        converters = super().get_db_converters(connection)
        return converters if settings.USE_TZ else [*converters, self._aware]

    @staticmethod
    def _aware(value: Any, expression: Any, connection: Any) -> Any:
        if not isinstance(value, datetime) or value.utcoffset() is not None:
            return value
        if connection.features.supports_timezones:  # PostgreSQL: local time in the session's zone
            return value.replace(tzinfo=zoneinfo.ZoneInfo(connection.timezone_name)).astimezone(UTC)
        return value.replace(tzinfo=UTC)

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.DateTimeField", args, kwargs
