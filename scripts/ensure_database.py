"""Make sure the database named by DATABASE_URL exists on its server; exit 1 if the server is unreachable.

pytest-django creates ``test_<name>`` itself, but it connects through ``<name>`` first, so the suite's
database must exist. Run by scripts/run-tests before each server database.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from testproject.settings import database_from_url  # noqa: E402


def main() -> int:
    config = database_from_url(os.environ["DATABASE_URL"])
    name = config["NAME"]
    try:
        if config["ENGINE"].endswith("postgresql"):
            import psycopg
            from psycopg import sql

            with psycopg.connect(
                dbname="postgres",
                user=config["USER"] or None,
                password=config["PASSWORD"] or None,
                host=config["HOST"] or None,
                port=config["PORT"] or None,
                autocommit=True,
                connect_timeout=5,
            ) as conn:
                if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
                    conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        elif config["ENGINE"].endswith("mysql"):
            import MySQLdb

            conn = MySQLdb.connect(
                user=config["USER"],
                passwd=config["PASSWORD"],
                host=config["HOST"] or "localhost",
                port=int(config["PORT"] or 3306),
                connect_timeout=5,
            )
            try:
                conn.cursor().execute(
                    f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
                )
            finally:
                conn.close()
    except Exception as exc:  # noqa: BLE001 - any failure means "cannot run the suite there"
        print(f"unreachable: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
