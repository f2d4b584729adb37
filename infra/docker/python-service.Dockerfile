# syntax=docker/dockerfile:1
#
# The Crosscheck Python services that need nothing from the OS beyond python:3.11-slim:
# one build target per service (actor, critic, research, fakemodel, orchestrator, console). The sandbox
# has its own file, sandbox.Dockerfile, because its runtime stage adds bubblewrap and the
# system python3.
#
#   docker build -f infra/docker/python-service.Dockerfile --target actor -t crosscheck-actor .
#
# The build context is the repository root. Each target is two short stages:
#   <svc>-venv  installs ONLY that service's distribution and its locked dependencies
#               (uv sync --frozen --package ...) into /opt/venv, as real wheels (--no-editable);
#   <svc>       copies that venv onto the slim runtime, runs as uid 10001.
# Adding a service is one more pair of stages; see infra/README.md.

# The builder and the runtime MUST use the same image: the venv is copied between them and
# points at this image's /usr/local/bin/python3.11.
ARG PYTHON_IMAGE=python:3.11-slim-trixie

# ---------------------------------------------------------------------------------- builder
FROM ${PYTHON_IMAGE} AS builder
ARG UV_VERSION=0.13.9
RUN pip install --no-cache-dir --disable-pip-version-check "uv==${UV_VERSION}"
ENV UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy \
    UV_PYTHON_DOWNLOADS=never \
    UV_PYTHON=/usr/local/bin/python3 \
    UV_PROJECT_ENVIRONMENT=/opt/venv
WORKDIR /src
# Every workspace member's manifest (uv needs the whole workspace to read uv.lock), but no
# source yet: the dependency layers below are rebuilt only when a manifest or the lock changes.
COPY pyproject.toml uv.lock ./
COPY shared/pyproject.toml shared/
COPY services/actor/pyproject.toml services/actor/
COPY services/critic/pyproject.toml services/critic/
COPY services/fakemodel/pyproject.toml services/fakemodel/
COPY services/sandbox/pyproject.toml services/sandbox/
COPY services/orchestrator/pyproject.toml services/orchestrator/
COPY services/research/pyproject.toml services/research/
COPY ui/pyproject.toml ui/

# ---------------------------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE} AS runtime
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
RUN groupadd --gid 10001 crosscheck \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin crosscheck
COPY infra/docker/healthcheck.py /opt/crosscheck/healthcheck.py
WORKDIR /opt/crosscheck

# ------------------------------------------------------------------------------------ actor
FROM builder AS actor-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-workspace --package crosscheck-actor
COPY shared/shared shared/shared
COPY services/actor/actor services/actor/actor
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable --package crosscheck-actor

FROM runtime AS actor
COPY --from=actor-venv /opt/venv /opt/venv
ENV ACTOR_HOST=0.0.0.0 \
    ACTOR_PORT=8001
EXPOSE 8001
USER 10001:10001
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "/opt/crosscheck/healthcheck.py", "ACTOR_PORT"]
ENTRYPOINT ["python", "-m", "actor"]

# ----------------------------------------------------------------------------------- critic
FROM builder AS critic-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-workspace --package crosscheck-critic
COPY shared/shared shared/shared
COPY services/critic/critic services/critic/critic
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable --package crosscheck-critic

FROM runtime AS critic
COPY --from=critic-venv /opt/venv /opt/venv
ENV CRITIC_HOST=0.0.0.0 \
    CRITIC_PORT=8002
EXPOSE 8002
USER 10001:10001
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "/opt/crosscheck/healthcheck.py", "CRITIC_PORT"]
ENTRYPOINT ["python", "-m", "critic"]

# --------------------------------------------------------------------------------- research
# The corpus index and the result cache are SQLite files under /opt/crosscheck/var/research
# (relative default paths): compose mounts a named volume on /opt/crosscheck/var, which Docker
# creates owned by uid 10001 from the folder made here.
FROM builder AS research-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-workspace --package crosscheck-research
COPY shared/shared shared/shared
COPY services/research/research services/research/research
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable --package crosscheck-research

FROM runtime AS research
COPY --from=research-venv /opt/venv /opt/venv
RUN mkdir -p /opt/crosscheck/var/research && chown -R 10001:10001 /opt/crosscheck/var
ENV RESEARCH_HOST=0.0.0.0 \
    RESEARCH_PORT=8005
EXPOSE 8005
USER 10001:10001
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "/opt/crosscheck/healthcheck.py", "RESEARCH_PORT"]
ENTRYPOINT ["python", "-m", "research"]

# -------------------------------------------------------------------------------- fakemodel
FROM builder AS fakemodel-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-workspace --package crosscheck-fakemodel
COPY services/fakemodel/fakemodel services/fakemodel/fakemodel
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable --package crosscheck-fakemodel

FROM runtime AS fakemodel
COPY --from=fakemodel-venv /opt/venv /opt/venv
ENV FAKEMODEL_HOST=0.0.0.0 \
    FAKEMODEL_PORT=8009
EXPOSE 8009
USER 10001:10001
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "/opt/crosscheck/healthcheck.py", "FAKEMODEL_PORT"]
ENTRYPOINT ["python", "-m", "fakemodel"]

# ----------------------------------------------------------------------------- orchestrator
# shared without its `providers` extra: no provider SDK in this image (it holds no keys). The
# psycopg it talks to Postgres with comes from its own dependencies; its alembic migrations
# ship inside the package (orchestrator/migrations) and run at start.
FROM builder AS orchestrator-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-workspace --package crosscheck-orchestrator
COPY shared/shared shared/shared
COPY services/orchestrator/orchestrator services/orchestrator/orchestrator
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable --package crosscheck-orchestrator

FROM runtime AS orchestrator
COPY --from=orchestrator-venv /opt/venv /opt/venv
ENV ORCHESTRATOR_HOST=0.0.0.0 \
    ORCHESTRATOR_PORT=8000
EXPOSE 8000
USER 10001:10001
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "/opt/crosscheck/healthcheck.py", "ORCHESTRATOR_PORT"]
ENTRYPOINT ["python", "-m", "orchestrator"]

# ---------------------------------------------------------------------------------- console
# The reviewer console (workspace member ui/, distribution crosscheck-ui, package `console`): a
# Streamlit script, not a `python -m` service. run_console.py execs the same `streamlit run`
# command line as `crosscheck up` (crosscheck.launcher.ConsoleSpec) on the installed
# console/app.py, on CONSOLE_HOST:CONSOLE_PORT. It talks to the orchestrator API only
# (CROSSCHECK_URL, set by compose); the reviewer logs in, so the image holds no token. shared
# comes without its `providers` extra: no provider SDK.
FROM builder AS console-venv
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-workspace --package crosscheck-ui
COPY shared/shared shared/shared
COPY ui/console ui/console
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable --package crosscheck-ui

FROM runtime AS console
COPY --from=console-venv /opt/venv /opt/venv
COPY infra/docker/run_console.py /opt/crosscheck/run_console.py
# HOME=/tmp: whatever Streamlit keeps under ~/.streamlit lands on the writable tmpfs (the root
# is read-only). No file watcher: the installed app never changes, and polling site-packages
# would only cost CPU.
ENV CONSOLE_HOST=0.0.0.0 \
    CONSOLE_PORT=8501 \
    HOME=/tmp \
    STREAMLIT_SERVER_FILE_WATCHER_TYPE=none
EXPOSE 8501
USER 10001:10001
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "/opt/crosscheck/healthcheck.py", "CONSOLE_PORT", "/_stcore/health"]
ENTRYPOINT ["python", "/opt/crosscheck/run_console.py"]
