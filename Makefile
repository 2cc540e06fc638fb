# The README's commands. Everything installs into a local virtualenv (.venv) on first use.
PYTHON ?= python3
VENV ?= .venv
DJANGO ?= Django>=5.2,<5.3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo-installed

.PHONY: demo test test-all lint bench clean migrations-check release-check release

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade 'pip>=25.1'
	$(PY) -m pip install --quiet --group dev -e '.[postgres]' '$(DJANGO)'
	@# Django 6 ships django.tasks; on Django 5.2 the Tasks backend's tests need the backport (the [tasks] extra)
	$(PY) -c 'import django.tasks' 2>/dev/null || $(PY) -m pip install --quiet -e '.[postgres,tasks]' '$(DJANGO)'
	@if command -v mariadb_config >/dev/null 2>&1 || command -v mysql_config >/dev/null 2>&1 || pkg-config --exists mariadb 2>/dev/null || pkg-config --exists mysqlclient 2>/dev/null; then \
		$(PY) -m pip install --quiet -e '.[mysql]' '$(DJANGO)' || echo "mysqlclient did not build: MariaDB tests will be skipped"; \
	else echo "no MariaDB/MySQL client headers (libmariadb-dev): MariaDB tests will be skipped"; fi
	touch $(STAMP)

# What the demo runs, nothing more: the package and Django (SQLite needs no driver), plus the Tasks
# backport on Django 5.2 (the testproject's TASKS names the backend). No dev toolchain, no database drivers.
$(DEMO_STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade 'pip>=25.1'
	$(PY) -m pip install --quiet -e . '$(DJANGO)'
	$(PY) -c 'import django.tasks' 2>/dev/null || $(PY) -m pip install --quiet -e '.[tasks]' '$(DJANGO)'
	touch $(DEMO_STAMP)

## demo: migrate the testproject on SQLite, schedule a delay, an event and an approval, and fire them;
## then leave an approval open and print its link, the admin console's and the dashboard's addresses and
## a staff user to log in with (after `manage.py runserver`)
demo: $(DEMO_STAMP)
	$(PY) manage.py migrate --verbosity 0
	$(PY) manage.py wakes_demo

## test: the everyday loop (README: what it took here): the unit and integration tests on SQLite, beside
## PostgreSQL where reachable (WAKES_TEST_DBS picks others), leaving out the suites that start real runner
## processes, Chromium, PgBouncer, broken servers, a Patroni cluster or fresh virtualenvs (make test-all)
EVERYDAY := not multiprocess and not browser and not pgbouncer and not install
test: $(STAMP)
	WAKES_TEST_DBS="$${WAKES_TEST_DBS:-sqlite postgres}" WAKES_TEST_MARK="$${WAKES_TEST_MARK:-$(EVERYDAY)}" \
		WAKES_PARALLEL=1 WAKES_FAULTS=0 WAKES_HA=0 WAKES_INSTALL=0 PYTHON=$(PY) bash scripts/run-tests

## test-all: everything CI runs (.ci/run calls it): the whole suite on SQLite, PostgreSQL and MariaDB where
## reachable (required when CI=true), the browser tests in Chromium (installed by scripts/install-browser;
## required when CI=true), the PgBouncer test, the fault and HA suites, and the README's install and quick
## start in fresh virtualenvs (tens of minutes)
test-all: $(STAMP)
	bash scripts/install-browser || [ "$${CI:-}" != "true" ]
	bash scripts/install-pgbouncer || [ "$${CI:-}" != "true" ]
	bash scripts/install-patroni || [ "$${CI:-}" != "true" ]
	PYTHON=$(PY) bash scripts/run-tests

## lint: ruff (lint and format), mypy with django-stubs over django_wakes/, and the migration check
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(PY) manage.py makemigrations django_wakes --check --dry-run

## bench: the benchmark (benchmarks/README.md), then the standard-API tasks one (benchmarks/tasks_api.py), in its own venv benchmarks/.env with the peers; ~8-15 min.
## Knobs: BENCH_QUICK=1 for a smoke run, BENCH_N, BENCH_DBS, BENCH_ONLY, ... (see benchmarks/README.md)
bench:
	@if [ ! -f benchmarks/.env/.installed ] || [ pyproject.toml -nt benchmarks/.env/.installed ]; then \
		$(PYTHON) -m venv benchmarks/.env && \
		benchmarks/.env/bin/python -m pip install --quiet --upgrade pip && \
		benchmarks/.env/bin/python -m pip install --quiet -e '.[postgres,mysql]' '$(DJANGO)' 'python-json-logger>=3.1' \
			'django-tasks-db[compat]==0.13.0' 'django-tasks==0.12.0' 'procrastinate==3.10.0' && \
		touch benchmarks/.env/.installed; fi
	benchmarks/.env/bin/python -m benchmarks.run
	benchmarks/.env/bin/python -m benchmarks.tasks_api

## release-check: build the sdist and wheel, twine check them, install the wheel into a fresh virtualenv
## outside the source tree and use it there (migrate on SQLite, schedule, runwakes --once, the admin pages)
release-check: $(STAMP)
	$(PY) scripts/wheel_smoke.py

## release: release-check, then build the sdist and wheel into dist/, `twine check --strict` them, check the
## version (django_wakes.__version__) has its CHANGELOG.md section, and print the `twine upload` command to
## run by hand: nothing is uploaded from here
release: release-check
	rm -rf dist
	$(PY) -m build --outdir dist .
	$(PY) -m twine check --strict dist/*
	$(PY) scripts/release_notes.py
	@echo "To publish, by hand: $(PY) -m twine upload dist/*"

clean:
	rm -rf $(VENV) testproject.sqlite3 .test.sqlite3* .pytest_cache build dist
