"""MySQL/MariaDB have no partial indexes: Django creates the conditional ones of 0016 there without
their condition (full indexes on the same columns).

So they also get the composite indexes the claim path used before 0016 (leading with ``state``),
under their own names; the project state does not track them (they exist on MySQL/MariaDB only).
InnoDB re-samples a table's statistics by itself after 10 % of its rows change, and its optimizer
does not pick them over the primary key as PostgreSQL's does with stale statistics.
"""

from django.db import migrations

INDEXES = {
    "wake_my_claim_due_idx": "state, due_at, id",
    "wake_my_lane_head_idx": "serial_key, state, due_at, id",
    "wake_my_lease_idx": "state, lease_until",
    "wake_my_gc_idx": "state, updated_at",
}


def create(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    for name, columns in INDEXES.items():
        schema_editor.execute(f"CREATE INDEX {name} ON django_wakes_wake ({columns})")


def drop(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    for name in INDEXES:
        schema_editor.execute(f"DROP INDEX {name} ON django_wakes_wake")


class Migration(migrations.Migration):
    atomic = False  # MySQL/MariaDB cannot roll DDL back: Django refuses it inside a transaction
    dependencies = [("django_wakes", "0016_partial_claim_indexes")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
