"""Database differences the migrations smooth over (imported by migrations: keep these stable).

MySQL's default ``utf8mb4_*_ci`` collations fold case, trailing spaces and many characters
(``"ABC" = "abc"``, ``"a" = "a "``, different emoji equal), so idempotency keys, lanes, event keys
and ``once()`` keys would collide there and nowhere else. :func:`binary_key_collation` converts every
table of this app that is not binary yet to a binary NO PAD collation, so keys compare byte for byte
as on SQLite and PostgreSQL. Every migration that creates a table runs it again at its end.
"""

from __future__ import annotations

from typing import Any

#: Binary collations that do not ignore trailing spaces (NO PAD) come first: MariaDB, then MySQL 8.
BINARY_COLLATIONS = ("utf8mb4_nopad_bin", "utf8mb4_0900_bin", "utf8mb4_bin")
DEFAULT_COLLATION = "utf8mb4_unicode_ci"


def _collations(connection: Any) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SHOW COLLATION WHERE Charset = 'utf8mb4'")
        return {row[0] for row in cursor.fetchall()}


def _app_tables(apps: Any) -> list[str]:
    return sorted({model._meta.db_table for model in apps.get_app_config("django_wakes").get_models()})


def _convert(apps: Any, schema_editor: Any, collation: str) -> None:
    connection = schema_editor.connection
    tables = _app_tables(apps)
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES WHERE TABLE_SCHEMA = DATABASE()"
        )
        current = dict(cursor.fetchall())
    for table in tables:
        if table in current and current[table] != collation:
            schema_editor.execute(
                f"ALTER TABLE {schema_editor.quote_name(table)} CONVERT TO CHARACTER SET utf8mb4 COLLATE {collation}"
            )


def binary_key_collation(apps: Any, schema_editor: Any) -> None:
    """Make this app's tables compare text byte for byte on MySQL/MariaDB; a no-op elsewhere."""
    if schema_editor.connection.vendor != "mysql":
        return
    available = _collations(schema_editor.connection)
    _convert(apps, schema_editor, next(name for name in BINARY_COLLATIONS if name in available))


def default_key_collation(apps: Any, schema_editor: Any) -> None:
    """Reverse of :func:`binary_key_collation`."""
    if schema_editor.connection.vendor != "mysql":
        return
    _convert(apps, schema_editor, DEFAULT_COLLATION)


#: MySQL/MariaDB have no partial indexes: Django creates the model's conditional indexes there without
#: their condition. These full, ``state``-leading indexes serve the claim path in their place (the
#: project state does not track them; they exist on MySQL/MariaDB only).
MYSQL_CLAIM_INDEXES = {
    "wake_my_claim_due_idx": "state, due_at, id",
    "wake_my_lane_head_idx": "serial_key, state, due_at, id",
    "wake_my_lease_idx": "state, lease_until",
    "wake_my_gc_idx": "state, updated_at",
    "wake_my_claim_order_idx": "state, priority DESC, due_at, id",
}


def mysql_claim_indexes(apps: Any, schema_editor: Any) -> None:
    """Create :data:`MYSQL_CLAIM_INDEXES` on MySQL/MariaDB; a no-op elsewhere."""
    if schema_editor.connection.vendor != "mysql":
        return
    for name, columns in MYSQL_CLAIM_INDEXES.items():
        schema_editor.execute(f"CREATE INDEX {name} ON django_wakes_wake ({columns})")


def drop_mysql_claim_indexes(apps: Any, schema_editor: Any) -> None:
    """Reverse of :func:`mysql_claim_indexes`."""
    if schema_editor.connection.vendor != "mysql":
        return
    for name in MYSQL_CLAIM_INDEXES:
        schema_editor.execute(f"DROP INDEX {name} ON django_wakes_wake")
