"""On MySQL/MariaDB, compare keys byte for byte, as SQLite and PostgreSQL do.

MySQL's default ``utf8mb4_*_ci`` collations fold case, trailing spaces and many characters
(``"ABC" = "abc"``, ``"a" = "a "``, different emoji equal), so idempotency keys, lanes, event keys and
``once()`` keys would collide there and nowhere else. Converting the tables to a binary NO PAD collation
(``utf8mb4_nopad_bin`` on MariaDB, ``utf8mb4_0900_bin`` on MySQL 8) makes
every key column (and any column a later migration alters, which takes the table default) binary.
A no-op on other databases.
"""

from django.db import migrations

TABLES = ("django_wakes_wake", "django_wakes_receipt", "django_wakes_runner")


#: Binary collations that do not ignore trailing spaces (NO PAD) come first: MariaDB, then MySQL 8.
BINARY_COLLATIONS = ("utf8mb4_nopad_bin", "utf8mb4_0900_bin", "utf8mb4_bin")


def _binary_collation(connection):
    with connection.cursor() as cursor:
        cursor.execute("SHOW COLLATION WHERE Charset = 'utf8mb4'")
        available = {row[0] for row in cursor.fetchall()}
    return next(name for name in BINARY_COLLATIONS if name in available)


def to_binary(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    collation = _binary_collation(schema_editor.connection)
    for table in TABLES:
        schema_editor.execute(
            f"ALTER TABLE {schema_editor.quote_name(table)} CONVERT TO CHARACTER SET utf8mb4 COLLATE {collation}"
        )


def to_default(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    for table in TABLES:
        schema_editor.execute(
            f"ALTER TABLE {schema_editor.quote_name(table)} CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
        )


class Migration(migrations.Migration):
    atomic = False  # MySQL cannot roll DDL back; the conversion is one statement per table

    dependencies = [
        ("django_wakes", "0004_fencing_and_start_guard"),
    ]

    operations = [
        migrations.RunPython(to_binary, to_default, elidable=False),
    ]
