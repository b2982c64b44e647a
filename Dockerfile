# Leoflow container image: `leoflow serve` by default, `leoflow db upgrade` for migrations.
#
# Stage 1 builds the wheel (the migrations ship inside it as package data: leoflow/migrations),
# stage 2 installs only that wheel and its dependencies into a slim runtime without compilers.
# Build:  docker build -t leoflow/leoflow:0.1.0 .

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
WORKDIR /src
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1
# The symlink leoflow/migrations -> ../alembic is preserved by COPY and resolved by the build.
COPY pyproject.toml README.md alembic.ini ./
COPY alembic/ alembic/
COPY leoflow/ leoflow/
RUN pip wheel --no-deps --wheel-dir /dist .

FROM ${PYTHON_IMAGE} AS runtime
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_NO_CACHE_DIR=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    LEOFLOW_HOME=/var/lib/leoflow \
    LEOFLOW_LOG_FORMAT=json
# Numeric IDs so Kubernetes can verify runAsNonRoot without reading /etc/passwd; they match
# the chart's securityContext (10001:10001).
RUN groupadd --system --gid 10001 leoflow \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/leoflow --shell /usr/sbin/nologin leoflow \
    && mkdir -p /var/lib/leoflow \
    && chown 10001:10001 /var/lib/leoflow
COPY --from=build /dist/ /tmp/dist/
# [otel]: the OpenTelemetry SDK, imported only when OTEL_EXPORTER_OTLP_ENDPOINT is set (docs/tracing.md).
# DL3013: the wheel is this build's own file; its extra's versions are bounded in pyproject.toml.
# hadolint ignore=DL3013
RUN for wheel in /tmp/dist/*.whl; do pip install --no-cache-dir "${wheel}[otel]"; done \
    && rm -rf /tmp/dist
WORKDIR /var/lib/leoflow
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["leoflow"]
CMD ["serve"]
