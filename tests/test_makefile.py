"""The Makefile's targets do what the README says: ``make demo`` installs only what the demo runs.

Read from ``make -n`` (what make would run, run nothing), with a fresh virtualenv path so every
install step is listed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def planned(target: str, venv: Path) -> list[str]:
    if shutil.which("make") is None:
        pytest.skip("no make")
    out = subprocess.run(  # noqa: S603
        ["make", "-n", "--no-print-directory", target, f"VENV={venv}", "PYTHON=python3"],  # noqa: S607 - make from PATH
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.splitlines()


def test_make_demo_installs_the_package_and_django_only(tmp_path):
    steps = planned("demo", tmp_path / "venv")
    installs = [step for step in steps if " -m pip install" in step and "--upgrade 'pip" not in step]
    assert installs, steps
    for step in installs:
        assert "--group" not in step, f"the demo installs the dev toolchain: {step}"
        targets = re.findall(r"-e '?(\.[^' ]*)'?", step)
        assert targets and set(targets) <= {".", ".[tasks]"}, f"the demo installs more than it runs: {step}"
    assert steps[-2:] == [
        f"{tmp_path / 'venv'}/bin/python manage.py migrate --verbosity 0",
        f"{tmp_path / 'venv'}/bin/python manage.py wakes_demo",
    ]


#: What ``make demo`` leaves out that a module might reach for at start-up (``--group dev``'s, by import name).
DEV_ONLY = (
    *("pythonjsonlogger", "opentelemetry", "selenium", "factory", "faker", "pytest", "pytest_django", "mypy"),
    *("ruff", "stripe", "standardwebhooks", "twine", "build"),
)

#: Start the testproject (settings, LOGGING, apps, system checks) with the dev toolchain made unimportable
#: the way Python documents it (``None`` in ``sys.modules``), as in the virtualenv ``make demo`` builds.
WITHOUT_DEV = f"""
import sys
for name in {DEV_ONLY!r}:
    sys.modules[name] = None
from django.core.management import execute_from_command_line
execute_from_command_line(["manage.py", "check"])
"""


def test_the_testproject_starts_without_the_dev_toolchain():
    """``make demo`` migrates and runs the testproject with Django and this package only."""
    environment = {k: v for k, v in os.environ.items() if k != "WAKES_LOG_FORMAT"}
    done = subprocess.run(  # noqa: S603 - our own interpreter on our own script
        [sys.executable, "-c", WITHOUT_DEV],
        cwd=ROOT,
        env={**environment, "DJANGO_SETTINGS_MODULE": "testproject.settings"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
