"""The table 0011 created compares lane keys byte for byte on MySQL/MariaDB too (django_wakes.dbcompat)."""

from django.db import migrations

from django_wakes.dbcompat import binary_key_collation, default_key_collation


class Migration(migrations.Migration):
    atomic = False  # MySQL cannot roll DDL back

    dependencies = [
        ("django_wakes", "0011_output_priority_queues_paused_lanes"),
    ]

    operations = [
        migrations.RunPython(binary_key_collation, default_key_collation, elidable=False),
    ]
