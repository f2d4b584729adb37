# Crosscheck: the two commands are `make run` and `make test`.
.PHONY: run test lint fmt typecheck pytest bench install docs

install:        ## install uv, system packages and the locked Python environment
	scripts/bootstrap.sh --dev

# `run` starts the venv's `crosscheck up` directly (bootstrap.sh has just synced the venv).
# scripts/up.py sits between make and it: make passes SIGTERM on to its child, so a SIGTERM to
# the process group would otherwise reach `crosscheck up` twice (the second skips the grace).
run:            ## install what is missing, then start every service (Ctrl-C stops all)
	scripts/bootstrap.sh
	exec .venv/bin/python scripts/up.py

test:           ## install, lint, type-check and run the whole test suite
	scripts/test.sh

lint:
	uv run --frozen ruff check .
	uv run --frozen ruff format --check .

fmt:
	uv run --frozen ruff format .
	uv run --frozen ruff check --fix .

typecheck:
	uv run --frozen mypy

pytest:         ## only the tests (after `make install`)
	uv run --frozen pytest

# LangGraph (the peers of bench.peers) comes from the `bench` dependency group, installed only here.
# The figures are kept in var/bench/results.json; bench/REPORT.md and its PNGs are made from them
# (`uv run --frozen python -m bench.report` re-renders the report without running anything).
bench:          ## benchmarks, then one report: bench/REPORT.md with PNG plots beside it
	uv run --frozen --group dev --group bench python -m bench

# The docs site (MkDocs Material, docs/ and mkdocs.yml) into var/site/; its hooks generate the
# configuration reference and the HTTP API pages from the code. Nothing is fetched from outside.
docs:           ## build the docs site into var/site (open var/site/index.html)
	NO_MKDOCS_2_WARNING=1 uv run --frozen --group docs mkdocs build --strict --site-dir var/site
