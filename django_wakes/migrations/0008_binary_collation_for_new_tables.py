"""The tables 0006 and 0007 created compare keys byte for byte on MySQL/MariaDB too (django_wakes.dbcompat)."""

from django.db import migrations

from django_wakes.dbcompat import binary_key_collation, default_key_collation


class Migration(migrations.Migration):
    atomic = False  # MySQL cannot roll DDL back

    dependencies = [
        ("django_wakes", "0007_retained_events_match_any_of"),
    ]

    operations = [
        migrations.RunPython(binary_key_collation, default_key_collation, elidable=False),
    ]
