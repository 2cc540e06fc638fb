"""Signed webhook deliveries: one row per accepted (source, delivery id), so a replay is refused.

On MySQL/MariaDB the new table gets the binary NO PAD collation of the others (migration 0005), so
delivery ids differing only in case are two deliveries there too, as on SQLite and PostgreSQL.
"""

from django.db import migrations, models

TABLE = "django_wakes_webhookdelivery"

#: Binary collations that do not ignore trailing spaces (NO PAD) come first: MariaDB, then MySQL 8.
#: (Kept here rather than imported, so this migration never changes when other code does.)
BINARY_COLLATIONS = ("utf8mb4_nopad_bin", "utf8mb4_0900_bin", "utf8mb4_bin")


def to_binary(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SHOW COLLATION WHERE Charset = 'utf8mb4'")
        available = {row[0] for row in cursor.fetchall()}
    collation = next(name for name in BINARY_COLLATIONS if name in available)
    schema_editor.execute(
        f"ALTER TABLE {schema_editor.quote_name(TABLE)} CONVERT TO CHARACTER SET utf8mb4 COLLATE {collation}"
    )


class Migration(migrations.Migration):
    atomic = False  # MySQL cannot roll DDL back, and refuses it inside a transaction

    dependencies = [
        ("django_wakes", "0005_binary_key_collation_on_mysql"),
    ]

    operations = [
        migrations.CreateModel(
            name="WebhookDelivery",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("source", models.CharField(max_length=100, verbose_name="source")),
                ("delivery_id", models.CharField(max_length=200, verbose_name="delivery id")),
                ("received_at", models.DateTimeField(verbose_name="received")),
            ],
            options={
                "verbose_name": "webhook delivery",
                "verbose_name_plural": "webhook deliveries",
                "indexes": [models.Index(fields=["received_at"], name="webhook_delivery_received_idx")],
                "constraints": [
                    models.UniqueConstraint(fields=("source", "delivery_id"), name="webhook_delivery_once")
                ],
            },
        ),
        # Dropping the table undoes the conversion: nothing to reverse.
        migrations.RunPython(to_binary, migrations.RunPython.noop, elidable=False),
    ]
