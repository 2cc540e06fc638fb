"""On MySQL/MariaDB, compare keys byte for byte, as SQLite and PostgreSQL do (see django_wakes.dbcompat)."""

from django.db import migrations

from django_wakes.dbcompat import binary_key_collation, default_key_collation


class Migration(migrations.Migration):
    atomic = False  # MySQL cannot roll DDL back; the conversion is one statement per table

    dependencies = [
        ("django_wakes", "0004_fencing_and_start_guard"),
    ]

    operations = [
        migrations.RunPython(binary_key_collation, default_key_collation, elidable=False),
    ]
