"""Placeholder replaced by the recurrence work (issue 3) before commit."""
