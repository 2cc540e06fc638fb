"""Build the release, install the wheel where no source tree is in reach, and use it as a stranger would.

1. ``python -m build`` makes the sdist and the wheel; ``twine check`` passes on both.
2. The wheel holds ``django_wakes`` only (its templates, migrations and ``py.typed``), and the sdist
   carries LICENSE, README.md, CHANGELOG.md and docs/.
3. A fresh virtualenv gets the wheel (and Django); a brand-new project in an empty temporary folder
   (not this checkout, which is kept off ``sys.path``) migrates on SQLite, schedules a wake, fires it
   with ``runwakes --once``, and renders the admin console's pages, the approval page, and the login page
   the wheel ships (``LOGIN_URL = "django_wakes:login"``) for a logged-out approver, back to the prompt.

Run by .ci/run; locally: ``python3 scripts/wheel_smoke.py`` (a few minutes: it builds and installs).
Exit status 0 only if every step held.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import venv
import zipfile
from pathlib import Path

SOURCE = Path(__file__).resolve().parent.parent
DJANGO = os.environ.get("WHEEL_SMOKE_DJANGO", "Django>=5.2,<5.3")

SETTINGS = """
SECRET_KEY = "wheel-smoke-only"
DEBUG = False
ALLOWED_HOSTS = ["testserver"]
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes",
    "django.contrib.sessions", "django.contrib.messages", "django.contrib.staticfiles", "django_wakes", "mysite",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware", "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware", "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "mysite.urls"
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "APP_DIRS": True, "OPTIONS": {
    "context_processors": ["django.template.context_processors.request", "django.contrib.auth.context_processors.auth",
                           "django.contrib.messages.context_processors.messages"]}}]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "smoke.sqlite3"}}
STATIC_URL = "static/"
LOGIN_URL = "django_wakes:login"  # the README's: the login page the package ships, no template of ours
WAKES = {"AUTHORIZE": "mysite.wakes.authorize"}
"""

URLS = """
from django.contrib import admin
from django.urls import include, path

urlpatterns = [path("admin/", admin.site.urls), path("wakes/", include("django_wakes.urls"))]
"""

SINKS = """
from pathlib import Path

from django_wakes import sink


def authorize(actor, workspace_id):
    return True


@sink("smoke.touch")
def touch(wake, result):
    Path(wake.intent["path"]).write_text("fired")
"""

CHECK = """
import sys
from pathlib import Path

from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

import django_wakes
from django_wakes.models import Wake

assert "site-packages" in django_wakes.__file__, django_wakes.__file__
wake = Wake.objects.get(kind="smoke.touch")
assert wake.state == "fired", wake.state
assert Path("touched").read_text() == "fired"

User.objects.create_superuser("admin", "admin@example.com", "pw")
client = Client()
client.force_login(User.objects.get(username="admin"))
pages = [
    reverse("admin:django_wakes_wake_changelist"),
    reverse("admin:django_wakes_wake_change", args=[wake.pk]),
    reverse("admin:django_wakes_dashboard"),
    reverse("admin:django_wakes_lanes"),
    reverse("admin:django_wakes_runner_changelist"),
]
for url in pages:
    response = client.get(url)
    assert response.status_code == 200, (url, response.status_code)
approval = django_wakes.request_approval(
    workspace_id="w", prompt="Deploy?", kind="smoke.touch", intent={"path": "x"}, expires_in="1d"
)
response = client.get(reverse("django_wakes:approve", args=[approval.token]), follow=True)
assert response.status_code == 200 and b"Deploy?" in response.content, response.status_code
# A logged-out approver: the link leads to the login page the wheel ships, and back to the prompt.
second = django_wakes.request_approval(workspace_id="w", prompt="Roll back?", kind="smoke.touch", expires_in="1d")
approver = Client()
login = approver.get(reverse("django_wakes:approve", args=[second.token]), follow=True)
assert login.status_code == 200 and b"Log in to answer the approval." in login.content, login.status_code
back = approver.post(login.redirect_chain[-1][0], {"username": "admin", "password": "pw"}, follow=True)
assert back.status_code == 200 and b"Roll back?" in back.content, back.status_code
print(
    f"smoke: wake {wake.pk} fired; {len(pages)} console pages, the approval page and its login page rendered",
    file=sys.stderr,
)
"""


def run(*args: str | Path, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    print("+", " ".join(str(a) for a in args), flush=True)
    done = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stdout.write(done.stdout)
        sys.stderr.write(done.stderr)
        raise SystemExit(f"failed ({done.returncode}): {' '.join(str(a) for a in args)}")
    return done.stdout + done.stderr


def check_contents(wheel: Path, sdist: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/", 1)[0] for name in names}
    strays = {top for top in tops if top != "django_wakes" and not top.endswith(".dist-info")}
    assert not strays, f"the wheel holds more than django_wakes: {sorted(strays)}"
    for needed in (
        "django_wakes/py.typed",
        "django_wakes/migrations/0001_initial.py",
        "django_wakes/templates/django_wakes/approve.html",
        "django_wakes/templates/admin/django_wakes/wake/change_list.html",
    ):
        assert needed in names, f"the wheel lacks {needed}"
    with tarfile.open(sdist) as archive:
        members = archive.getnames()
    root = members[0].split("/", 1)[0]
    for needed in ("LICENSE", "README.md", "CHANGELOG.md", "docs/architecture.md", "pyproject.toml"):
        assert f"{root}/{needed}" in members, f"the sdist lacks {needed}"
    print(f"contents: wheel {len(names)} files (django_wakes only), sdist {len(members)} entries", flush=True)


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="wakes-wheel-") as tmp:
        work = Path(tmp)
        dist = work / "dist"
        run(sys.executable, "-m", "build", "--outdir", dist, SOURCE)
        wheel, sdist = next(dist.glob("*.whl")), next(dist.glob("*.tar.gz"))
        run(sys.executable, "-m", "twine", "check", "--strict", wheel, sdist)
        check_contents(wheel, sdist)

        env_dir = work / "venv"
        venv.create(env_dir, with_pip=True)
        python = env_dir / "bin" / "python"
        run(python, "-m", "pip", "install", "--quiet", str(wheel), DJANGO)

        project = work / "project"
        (project / "mysite").mkdir(parents=True)
        (project / "mysite" / "__init__.py").write_text("")
        (project / "mysite" / "settings.py").write_text(textwrap.dedent(SETTINGS))
        (project / "mysite" / "urls.py").write_text(textwrap.dedent(URLS))
        (project / "mysite" / "wakes.py").write_text(textwrap.dedent(SINKS))
        (project / "check.py").write_text(textwrap.dedent(CHECK))
        env = {
            "PATH": os.environ.get("PATH", ""),
            "HOME": str(work),
            "DJANGO_SETTINGS_MODULE": "mysite.settings",
            "PYTHONPATH": str(project),  # the new project only: never this checkout
        }
        admin = [python, "-m", "django"]
        run(*admin, "check", cwd=project, env=env)  # W002 (no SPAWN_TURN) is honest here: kind= is always given
        run(*admin, "migrate", "--verbosity", "0", cwd=project, env=env)
        touched = project / "touched"
        create = (
            "import django_wakes; "
            "django_wakes.schedule(workspace_id='w', delay='0s', kind='smoke.touch', "
            f"intent={{'path': {str(touched)!r}}})"
        )
        run(*admin, "shell", "-c", create, cwd=project, env=env)
        out = run(*admin, "runwakes", "--once", cwd=project, env=env)
        run(*admin, "shell", "-c", "exec(open('check.py').read())", cwd=project, env=env)
        print(out.strip().splitlines()[-1] if out.strip() else "runwakes --once: (no output)")
        print("wheel smoke: ok", flush=True)


if __name__ == "__main__":
    main()
