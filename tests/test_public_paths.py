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
        ("admin:django_wakes_limits", []),
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
    "admin/django_wakes/wake/limits.html",
    "admin/django_wakes/wake/operate_confirm.html",
    "admin/django_wakes/chain/chain.html",
    "admin/django_wakes/chain/confirm.html",
]


@pytest.mark.parametrize("name", TEMPLATES)
def test_an_overridable_template_keeps_its_name(name):
    assert get_template(name)


# --------------------------------------------------------------------------------------------------
# Beyond import paths: the migrations, settings, check ids and result keys the docs name (issue 27, item 4)
# --------------------------------------------------------------------------------------------------

SOURCE = ROOT / "django_wakes"
MIGRATIONS = sorted(path.stem for path in (SOURCE / "migrations").glob("0*.py"))

#: ``0004_session_is_workspace_and_id``; ``migration 0013``, ``migrations 0016/0017`` (a number alone).
MIGRATION_NAME = re.compile(r"\b(\d{4}_[a-z][a-z0-9_]*)\b")
MIGRATION_NUMBERS = re.compile(r"\bmigrations? `?(\d{4}(?:`?(?:/|, | and )`?\d{4})*)")
#: A row of the history table in docs/architecture.md names the pre-release migrations the squash replaced.
SQUASHED_HISTORY = "one generated `0001_initial`"


def documented_migrations() -> list[tuple[str, str]]:
    found: set[tuple[str, str]] = set()
    for document in DOCUMENTS:
        for line in document.read_text().splitlines():
            if SQUASHED_HISTORY in line:
                continue
            found.update((name, document.name) for name in MIGRATION_NAME.findall(line))
            for numbers in MIGRATION_NUMBERS.findall(line):
                found.update((number, document.name) for number in re.findall(r"\d{4}", numbers))
    return sorted(found)


@pytest.mark.parametrize(("migration", "document"), documented_migrations())
def test_a_documented_migration_exists(migration, document):
    assert any(name == migration or name.startswith(f"{migration}_") for name in MIGRATIONS), (
        f"{document} names migration {migration}; django_wakes/migrations has {MIGRATIONS}"
    )


def documented_settings() -> list[tuple[str, str]]:
    """``WAKES["X"]`` in text, and the keys of ``WAKES = {...}`` in the Python blocks that parse."""
    import ast

    found: set[tuple[str, str]] = set()
    for document in DOCUMENTS:
        text = document.read_text()
        found.update((name, document.name) for name in re.findall(r"WAKES\[[\"']([A-Za-z_]+)[\"']\]", text))
        for block in re.findall(r"```python\n(.*?)```", text, re.S):
            try:
                tree = ast.parse(block)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "WAKES" for t in node.targets)
                    and isinstance(node.value, ast.Dict)
                ):
                    found.update(
                        (key.value, document.name)
                        for key in node.value.keys
                        if isinstance(key, ast.Constant) and isinstance(key.value, str)
                    )
    return sorted(found)


def test_the_docs_name_settings_in_both_forms():
    names = {name for name, _ in documented_settings()}
    assert {"LEASE", "SINKS", "SPAWN_TURN", "AUTHORIZE"} <= names, names


@pytest.mark.parametrize(("setting", "document"), documented_settings())
def test_a_documented_setting_exists(setting, document):
    from django_wakes.conf import DEFAULTS

    assert setting in DEFAULTS, f"{document} names WAKES[{setting!r}], which django_wakes.conf does not know"


def documented_check_ids() -> list[tuple[str, str]]:
    pattern = re.compile(r"\bdjango_wakes\.(?:tasks\.)?[EW]\d{3}\b")
    return sorted({(m.group(0), d.name) for d in DOCUMENTS for m in pattern.finditer(d.read_text())})


@pytest.mark.parametrize(("check_id", "document"), documented_check_ids())
def test_a_documented_check_id_is_reported_by_some_check(check_id, document):
    source = "\n".join(path.read_text() for path in SOURCE.rglob("*.py"))
    assert f'"{check_id}"' in source, f"{document} names {check_id}, which no check reports"


def result_keys_in_code() -> set[str]:
    """Every key of a result a sink is handed, read from the engine's and the schedules' source.

    A result is a dict literal with a ``"trigger"`` key (and the keys added to such a dict later,
    ``result["retained_at"] = ...``).
    """
    import ast

    keys: set[str] = set()
    for folder in ("engine", "schedules"):
        for path in (SOURCE / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Dict):
                    names = [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
                    if "trigger" in names:
                        keys.update(names)
                elif isinstance(node, ast.Assign):
                    for target in node.targets:
                        if (
                            isinstance(target, ast.Subscript)
                            and isinstance(target.value, ast.Name)
                            and target.value.id == "result"
                            and isinstance(target.slice, ast.Constant)
                        ):
                            keys.add(target.slice.value)
    return keys


def readme_result_list() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("- Sinks receive `result`")
    return text[start : text.index("\n- ", start + 1)]


def test_the_readme_result_list_names_every_key_a_result_carries():
    keys = result_keys_in_code()
    assert {"trigger", "slot", "event_key", "payload", "answer", "expired"} <= keys, keys
    listed = readme_result_list()
    missing = sorted(key for key in keys if f'"{key}"' not in listed and f"`{key}`" not in listed)
    assert not missing, f"README.md's result list leaves out {missing}"


def test_every_key_the_readme_result_list_names_is_one_a_result_carries():
    from django_wakes.models import TriggerType

    named = set(re.findall(r'"([a-z_]+)"', readme_result_list()))
    unknown = named - result_keys_in_code() - set(TriggerType.values)
    assert not unknown, f"README.md's result list names keys no result carries: {sorted(unknown)}"


def test_the_docs_give_the_tools_one_import_path():
    """``from django_wakes import tools`` / ``django_wakes.tools``; ``django_wakes.agents.tools`` still imports."""
    for document in DOCUMENTS:
        assert "django_wakes.agents.tools" not in document.read_text(), document.name
    assert resolve("django_wakes.agents.tools.tool_definitions") is resolve("django_wakes.tools.tool_definitions")


def test_every_readme_link_to_a_section_finds_it():
    """The quick start's "Where next" (and every other ``](#anchor)``) leads to a heading of the README."""
    text = (ROOT / "README.md").read_text()
    headings = re.findall(r"^#{1,6} (.+)$", text, re.M)
    slugs = {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-") for heading in headings}
    anchors = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert {"install", "the-api", "running-it", "working-on-django-wakes"} <= anchors, anchors
    assert anchors <= slugs, sorted(anchors - slugs)
