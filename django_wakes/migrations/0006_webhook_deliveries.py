"""Signed webhook deliveries: one row per accepted (source, delivery id), so a replay is refused.

On MySQL/MariaDB the new table gets the binary NO PAD collation of the others (migration 0005), so
delivery ids differing only in case are two deliveries there too, as on SQLite and PostgreSQL.
"""

from importlib import import_module

from django.db import migrations, models

TABLE = "django_wakes_webhookdelivery"


def to_binary(apps, schema_editor):
    if schema_editor.connection.vendor != "mysql":
        return
    collation = import_module("django_wakes.migrations.0005_binary_key_collation_on_mysql")._binary_collation(
        schema_editor.connection
    )
    schema_editor.execute(
        f"ALTER TABLE {schema_editor.quote_name(TABLE)} CONVERT TO CHARACTER SET utf8mb4 COLLATE {collation}"
    )


class Migration(migrations.Migration):
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
