"""Every import path, URL name and template name the README and docs tell users about still resolves.

The dotted paths are read out of README.md and docs/*.md themselves (``django_wakes.x.y`` in text and
code, and ``from django_wakes... import a, b`` lines), so a module moved without a re-export, or a doc
naming a path that never existed, fails here with the file that names it.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from django.template.loader import get_template
from django.urls import reverse

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

DOTTED = re.compile(r"(?<![\w.])django_wakes(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
FROM_IMPORT = re.compile(
    r"from (django_wakes(?:\.[A-Za-z_][A-Za-z0-9_]*)*) import (\([A-Za-z0-9_,\s]+\)|[A-Za-z0-9_, ]+)"
)
#: Dotted names that are not Python paths: check ids, a sink kind, the logger, a permission.
NOT_PATHS = re.compile(r"^django_wakes\.(?:[EW]\d{3}|tasks\.[EW]\d{3}|task|operate_wake|view_wake|[EW])$")


def resolve(dotted: str) -> object:
    """Import the longest module prefix of ``dotted`` and walk the rest as attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            value: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in parts[cut:]:
            value = getattr(value, name)
        return value
    raise ModuleNotFoundError(dotted)


def documented_paths() -> list[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for document in DOCUMENTS:
        text = document.read_text()
        for match in DOTTED.finditer(text):
            dotted = match.group(0).rstrip(".")
            if not NOT_PATHS.match(dotted):
                found.add((dotted, document.name))
        for match in FROM_IMPORT.finditer(text):
            module, names = match.group(1), match.group(2).strip("()")
            for name in re.split(r"[,\s]+", names.strip()):
                if name and name != "as":
                    found.add((f"{module}.{name}", document.name))
    return sorted(found)


PATHS = documented_paths()


def test_the_docs_name_the_paths_users_rely_on():
    named = {path for path, _ in PATHS}
    for path in ("django_wakes.tools", "django_wakes.urls", "django_wakes.tasks.WakesBackend", "django_wakes.testing"):
        assert any(p == path or p.startswith(path + ".") for p in named), path


@pytest.mark.parametrize(("dotted", "document"), PATHS, ids=[f"{d} ({doc})" for d, doc in PATHS])
def test_a_documented_path_resolves(dotted, document):
    try:
        resolve(dotted)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"{document} names {dotted}, which does not resolve: {exc}")


def test_the_package_root_exports_what_it_lists():
    import django_wakes

    for name in django_wakes.__all__:
        assert getattr(django_wakes, name) is not None, name


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("django_wakes:approve", ["t0ken"]),
        ("django_wakes:answer", []),
        ("django_wakes:refused", ["expired"]),
        ("django_wakes:login", []),
        ("django_wakes:approval_api", []),
        ("django_wakes:event_webhook", ["github"]),
        ("django_wakes:metrics", []),
        ("admin:django_wakes_wake_changelist", []),
        ("admin:django_wakes_wake_change", [1]),
        ("admin:django_wakes_wake_operate", [1, "cancel"]),
        ("admin:django_wakes_dashboard", []),
        ("admin:django_wakes_lanes", []),
        ("admin:django_wakes_chain", ["chain-1"]),
        ("admin:django_wakes_runner_changelist", []),
    ],
)
def test_a_documented_url_name_reverses(name, args):
    assert reverse(name, args=args)


#: Templates a project may override (Django's template loader looks in the project's dirs first).
TEMPLATES = [
    "django_wakes/base.html",
    "django_wakes/approve.html",
    "django_wakes/approve_done.html",
    "django_wakes/approve_refused.html",
    "django_wakes/login.html",
    "admin/django_wakes/app_index.html",
    "admin/django_wakes/dashboard.html",
    "admin/django_wakes/wake/change_list.html",
    "admin/django_wakes/wake/change_form.html",
    "admin/django_wakes/wake/lanes.html",
    "admin/django_wakes/wake/operate_confirm.html",
    "admin/django_wakes/chain/chain.html",
    "admin/django_wakes/chain/confirm.html",
]


@pytest.mark.parametrize("name", TEMPLATES)
def test_an_overridable_template_keeps_its_name(name):
    assert get_template(name)
