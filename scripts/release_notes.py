"""``make release``'s last check: the version in ``django_wakes.__version__`` is what dist/ holds, and the
CHANGELOG says what it is.

- the version is a valid PEP 440 version, and dist/ holds exactly its wheel and sdist
  (``django_wakes-<version>-py3-none-any.whl``, ``django_wakes-<version>.tar.gz``);
- a release version (``0.1.0``) has a dated section in CHANGELOG.md: ``## [0.1.0] — 2027-01-15``;
- a development or pre-release version (``0.1.0.dev0``) passes with a note saying what to change before
  uploading it to PyPI (such a build is for TestPyPI or a private index).

Exit status 1 with the reason otherwise. Nothing is uploaded: ``make release`` prints the command.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import django_wakes  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default=django_wakes.__version__, help="default: django_wakes.__version__")
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument("--changelog", type=Path, default=ROOT / "CHANGELOG.md")
    options = parser.parse_args(argv)
    text = options.version
    try:
        version = Version(text)
    except InvalidVersion:
        print(f"release: django_wakes.__version__ = {text!r} is not a PEP 440 version")
        return 1
    dist = options.dist
    expected = {f"django_wakes-{version}-py3-none-any.whl", f"django_wakes-{version}.tar.gz"}
    found = {path.name for path in dist.glob("*")} if dist.is_dir() else set()
    if found != expected:
        print(f"release: dist/ holds {sorted(found)}, expected {sorted(expected)} (run make release)")
        return 1
    changelog = options.changelog.read_text()
    if version.is_prerelease or version.is_devrelease:
        print(
            f"release: {version} is a development version: fine for TestPyPI or a private index. Before uploading "
            f'to PyPI set django_wakes.__version__ = "{version.base_version}" and date its CHANGELOG.md section '
            f"(## [{version.base_version}] — YYYY-MM-DD)."
        )
        return 0
    if not re.search(rf"^## \[{re.escape(str(version))}\] — \d{{4}}-\d{{2}}-\d{{2}}", changelog, re.M):
        print(f"release: CHANGELOG.md has no dated section for {version} (## [{version}] — YYYY-MM-DD)")
        return 1
    print(f"release: {version}: dist/ and CHANGELOG.md agree")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
