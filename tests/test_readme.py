"""The README's front door, run exactly as written: its quick start and its install commands (issue 27, items 1-2).

The code blocks are read out of README.md itself, between the ``<!-- quickstart ... -->`` and
``<!-- install ... -->`` markers, and run in a fresh virtualenv and an empty folder: nothing of this
checkout's environment (no ``DJANGO_SETTINGS_MODULE``, no ``PYTHONPATH``) reaches them. The only
changes made to what the README says: ``/path/to/django-wakes`` becomes a copy of this checkout and
``<version>`` the package's version (``django_wakes.__version__``); a ``# path/to/file.py`` block is
written to that file (appended if it exists, as "add at the end" says); and the ``runwakes`` that
runs until Ctrl-C gets its Ctrl-C (SIGINT) once the sink's output the README promises has appeared.

Marked ``install`` (pip installs into new virtualenvs: a minute or two): ``make test`` leaves it out,
``make test-all`` and CI run it once.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
import venv
from pathlib import Path

import pytest

import django_wakes

pytestmark = pytest.mark.install

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PLACEHOLDER = "/path/to/django-wakes"
#: What a checkout copy leaves out: VCS data, virtualenvs, caches, build output, local databases.
NOT_COPIED = shutil.ignore_patterns(
    ".git",
    ".venv*",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    ".mypy_cache",
    "build",
    "dist",
    "*.egg-info",
    "*.sqlite3*",
    "benchmarks",
    ".faults*",
    ".test*",
)


def blocks(marker: str) -> list[tuple[str, str]]:
    """The fenced code blocks (language, text) between ``<!-- marker ...-->`` and ``<!-- /marker -->``."""
    text = README.read_text()
    start = text.index(f"<!-- {marker}")
    section = text[start : text.index(f"<!-- /{marker} -->", start)]
    found = re.findall(r"```(\w+)\n(.*?)```", section, re.S)
    assert found, f"no code blocks between the {marker} markers of README.md"
    return found


def commands(block: str) -> list[str]:
    return [line for line in block.splitlines() if line.strip() and not line.lstrip().startswith("#")]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A copy of the checkout, an empty folder and a new virtualenv, with an environment pointing at nothing else."""
    base = tmp_path_factory.mktemp("readme")
    checkout = base / "django-wakes"
    shutil.copytree(ROOT, checkout, ignore=NOT_COPIED)
    env_dir = base / "venv"
    venv.create(env_dir, with_pip=True)
    environment = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DJANGO_SETTINGS_MODULE", "PYTHONPATH", "DATABASE_URL", "VIRTUAL_ENV", "PYTHONHOME"}
    }
    environment.update(
        PATH=f"{env_dir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        VIRTUAL_ENV=str(env_dir),
        HOME=str(base),
        PYTHONUNBUFFERED="1",  # the sink's print reaches the pipe at once, as it reaches a terminal
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    return {"checkout": checkout, "env": environment, "venv": env_dir, "base": base}


def as_written(line: str, fresh: dict[str, object]) -> str:
    return line.replace(PLACEHOLDER, str(fresh["checkout"])).replace("<version>", django_wakes.__version__)


def sh(line: str, *, cwd: Path, env: dict[str, str], timeout: float = 300) -> str:
    done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"$ {line}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


def test_the_quick_start_runs_as_written(fresh):
    folder = fresh["base"] / "quickstart"  # type: ignore[operator]
    folder.mkdir()
    env: dict[str, str] = fresh["env"]  # type: ignore[assignment]
    runner = None
    for language, text in blocks("quickstart"):
        if language == "python":
            target = folder / text.splitlines()[0].removeprefix("# ").split(":")[0]
            if target.exists():  # settings.py: "add at the end"
                target.write_text(target.read_text() + "\n" + text)
            else:  # wakes.py: a new module
                target.write_text(text)
            continue
        assert language == "bash", language
        for line in commands(text):
            line = as_written(line, fresh)
            if re.match(r"python manage\.py runwakes(?!.*--once)", line):
                out, err = folder / "runwakes.out", folder / "runwakes.err"
                with out.open("w") as stdout, err.open("w") as stderr:
                    proc = subprocess.Popen(
                        ["bash", "-c", f"exec {line}"], cwd=folder, env=env, stdout=stdout, stderr=stderr
                    )
                runner = (line, proc, out, err)
            else:
                sh(line, cwd=folder, env=env)
    assert runner is not None, "the quick start runs runwakes"
    line, proc, out, err = runner
    promised = re.search(r'prints "([^"]+)"', line)
    assert promised, f"the runwakes line says what the sink prints: {line}"
    deadline = time.monotonic() + 90
    while promised.group(1) not in out.read_text() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)  # the Ctrl-C the README's comment tells the reader to press
    proc.wait(timeout=60)
    printed, logged = out.read_text(), err.read_text()
    assert promised.group(1) in printed, f"runwakes did not print {promised.group(1)!r}:\n{printed}\n{logged}"
    assert proc.returncode == 0, logged
    assert "runwakes stopped: fired 1," in logged, logged


def test_the_install_commands_work(fresh):
    """Both ways the Install section gives, each line as written; then the package and the extra's driver import."""
    env: dict[str, str] = fresh["env"]  # type: ignore[assignment]
    python = str(fresh["venv"] / "bin" / "python")  # type: ignore[operator]
    where = fresh["base"]
    ran = []
    for language, text in blocks("install"):
        assert language == "bash", language
        for line in commands(text):
            sh(as_written(line, fresh), cwd=where, env=env)  # type: ignore[arg-type]
            ran.append(line)
            probe = "import django_wakes, psycopg; print(django_wakes.__version__, django_wakes.__file__)"
            out = subprocess.run([python, "-c", probe], cwd=where, env=env, capture_output=True, text=True, check=False)
            if "pip install" in line:
                assert out.returncode == 0, f"after {line}:\n{out.stderr}"
                version, path = out.stdout.split()
                assert version == django_wakes.__version__
                assert "site-packages" in path, path
    assert any(".whl" in line for line in ran) and any("python -m build" in line for line in ran), ran
