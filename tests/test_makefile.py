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


# --------------------------------------------------------------------------------------------------
# make test (the everyday loop), make test-all (what CI runs), make release (issue 27, items 1 and 8)
# --------------------------------------------------------------------------------------------------

#: The suites ``make test`` leaves to ``make test-all``: real runner processes, Chromium, PgBouncer, broken
#: servers, a Patroni cluster, fresh virtualenvs.
SLOW_MARKERS = ("multiprocess", "browser", "pgbouncer", "faults", "ha", "install")


def commands(target: str, venv: Path) -> list[str]:
    """``planned`` with a recipe line continued by a backslash joined to the next."""
    return "\n".join(planned(target, venv)).replace("\\\n", " ").splitlines()


def test_make_test_is_the_everyday_loop(tmp_path):
    (step,) = [s for s in commands("test", tmp_path / "venv") if "scripts/run-tests" in s]
    assert 'WAKES_TEST_DBS="${WAKES_TEST_DBS:-sqlite postgres}"' in step, step
    mark = re.search(r'WAKES_TEST_MARK="\$\{WAKES_TEST_MARK:-([^}]*)\}"', step)
    assert mark, step
    for marker in ("multiprocess", "browser", "pgbouncer", "install"):
        assert f"not {marker}" in mark.group(1), (marker, step)
    assert "WAKES_FAULTS=0" in step and "WAKES_HA=0" in step and "WAKES_INSTALL=0" in step, step
    assert not [s for s in planned("test", tmp_path / "venv") if "scripts/install-" in s]


def test_make_test_all_runs_every_suite(tmp_path):
    steps = planned("test-all", tmp_path / "venv")
    (step,) = [s for s in steps if "scripts/run-tests" in s]
    assert "WAKES_TEST_MARK" not in step and "WAKES_FAULTS" not in step and "WAKES_INSTALL" not in step, step
    for tool in ("install-browser", "install-pgbouncer", "install-patroni"):
        assert any(f"scripts/{tool}" in s for s in steps), tool
    runner = (ROOT / "scripts" / "run-tests").read_text()
    for marker in ("faults", "ha", "install"):  # once, not per database; the rest run on every database
        assert f'-m {marker} "$@"' in runner, marker
    assert 'select="not faults and not ha and not install"' in runner


def test_ci_calls_make_test_all_and_the_readme_documents_both():
    ci = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if not line.lstrip().startswith("#")]
    calls = re.findall(r"\bmake (test\S*) ", "\n".join(ci))
    assert calls and set(calls) == {"test-all"}, calls
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"^make test +#", readme, re.M) and re.search(r"^make test-all +#", readme, re.M)


def test_every_marker_is_run_by_make_test_all():
    """No test is dropped from CI: each marker pyproject.toml declares is a suite run-tests selects."""
    declared = re.findall(r'^\s+"(\w+): ', (ROOT / "pyproject.toml").read_text(), re.M)
    assert set(declared) == set(SLOW_MARKERS), declared
    runner = (ROOT / "scripts" / "run-tests").read_text()
    assert '[ "$db" = postgres ] || select="$select and not pgbouncer"' in runner  # pgbouncer: on postgres
    # multiprocess and browser are in the per-database select (only faults, ha, install are left out of it)


def test_make_release_checks_and_prints_the_upload_without_uploading(tmp_path):
    steps = planned("release", tmp_path / "venv")
    text = "\n".join(steps)
    for needed in ("scripts/wheel_smoke.py", "-m build --outdir dist .", "-m twine check --strict dist/*"):
        assert needed in text, needed
    assert "scripts/release_notes.py" in text
    uploads = [s for s in steps if "twine upload" in s]
    assert uploads and all(s.startswith("echo ") for s in uploads), uploads


@pytest.mark.parametrize(
    ("version", "changelog", "status", "says"),
    [
        ("0.1.0.dev0", "## [Unreleased] — 0.1.0\n", 0, "is a development version"),
        ("0.1.0", "## [Unreleased] — 0.1.0\n", 1, "CHANGELOG.md has no dated section for 0.1.0"),
        ("0.1.0", "## [0.1.0] — 2027-01-15\n", 0, "dist/ and CHANGELOG.md agree"),
    ],
)
def test_the_release_notes_check(tmp_path, version, changelog, status, says):
    dist = tmp_path / "dist"
    dist.mkdir()
    for name in (f"django_wakes-{version}-py3-none-any.whl", f"django_wakes-{version}.tar.gz"):
        (dist / name).touch()
    (tmp_path / "CHANGELOG.md").write_text(changelog)
    done = subprocess.run(  # noqa: S603
        [
            sys.executable,
            "scripts/release_notes.py",
            "--version",
            version,
            "--dist",
            str(dist),
            "--changelog",
            str(tmp_path / "CHANGELOG.md"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == status and says in done.stdout, done.stdout + done.stderr


def test_the_release_notes_check_refuses_a_dist_of_another_version(tmp_path):
    (tmp_path / "django_wakes-0.0.9-py3-none-any.whl").touch()
    done = subprocess.run(  # noqa: S603
        [sys.executable, "scripts/release_notes.py", "--dist", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1 and "expected" in done.stdout, done.stdout
