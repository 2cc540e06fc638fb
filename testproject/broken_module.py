"""A module that fails as it is imported, and not with ImportError (``tests/test_checks.py`` names it in settings)."""

raise RuntimeError("testproject.broken_module refuses to load")
