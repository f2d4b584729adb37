# syntax=docker/dockerfile:1
#
# The Crosscheck sandbox: runs untrusted generated code against tests. Same builder as
# python-service.Dockerfile, but the runtime adds what each job runs in:
#   bubblewrap     the per-job namespaces (no network, private filesystem, own pid space);
#   python3        Debian's /usr/bin/python3, the interpreter jobs run under (the service's
#                  own venv stays out of the jobs' reach);
#   libseccomp2    for building the per-job seccomp filter.
# It holds no provider keys: nothing here or in docker-compose.yml gives it any.
#
#   docker build -f infra/docker/sandbox.Dockerfile -t crosscheck-sandbox .
#
# Inside Docker, bubblewrap needs the container's seccomp/AppArmor/masked-/proc confinement
# relaxed (see docker-compose.yml and infra/README.md, "The sandbox in a container").

# The builder and the runtime MUST use the same image: the venv is copied between them.
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
COPY pyproject.toml uv.lock ./
COPY shared/pyproject.toml shared/
COPY services/actor/pyproject.toml services/actor/
COPY services/critic/pyproject.toml services/critic/
COPY services/fakemodel/pyproject.toml services/fakemodel/
COPY services/sandbox/pyproject.toml services/sandbox/
COPY services/orchestrator/pyproject.toml services/orchestrator/
COPY services/research/pyproject.toml services/research/
COPY ui/pyproject.toml ui/
# Only crosscheck-sandbox and its locked dependencies: no provider SDKs end up in this image.
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-install-workspace --package crosscheck-sandbox
COPY shared/shared shared/shared
COPY services/sandbox/sandbox services/sandbox/sandbox
RUN --mount=type=cache,target=/root/.cache/uv \
    uv sync --frozen --no-dev --no-editable --package crosscheck-sandbox

# ---------------------------------------------------------------------------------- runtime
FROM ${PYTHON_IMAGE} AS runtime
# Debian's packages follow the image's release; the image tag is the pin.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends bubblewrap python3 libseccomp2 \
    && rm -rf /var/lib/apt/lists/*
RUN groupadd --gid 10001 crosscheck \
    && useradd --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin crosscheck
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    SANDBOX_HOST=0.0.0.0 \
    SANDBOX_PORT=8003 \
    SANDBOX_ALLOW_WEAK_ISOLATION=0
COPY infra/docker/healthcheck.py /opt/crosscheck/healthcheck.py
COPY --from=builder /opt/venv /opt/venv
WORKDIR /opt/crosscheck
EXPOSE 8003
USER 10001:10001
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "/opt/crosscheck/healthcheck.py", "SANDBOX_PORT"]
ENTRYPOINT ["python", "-m", "sandbox"]
