"""The django-wakes benchmark (``make bench``): see README.md. Not part of the test suite."""
