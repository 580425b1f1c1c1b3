# syntax=docker/dockerfile:1
# rewardseal-control: the control plane (contract registry, certificates, revocation, receipt
# index). Build from the repository root (docker compose -f deploy/docker-compose.yml build does):
#
#   docker build -f deploy/docker/control.Dockerfile -t rewardseal/control:0.1.0 .
#
# The build stage makes wheels for the distributions and every runtime dependency at exactly the
# versions requirements.lock pins (the lock is the constraint file, also for the build backend),
# so the image holds what the service runs and none of the repository's tooling.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_CONSTRAINT=/src/requirements.lock
WORKDIR /src
COPY requirements.lock ./
COPY clients/python ./clients/python
COPY services/common ./services/common
COPY services/control ./services/control
RUN pip wheel --wheel-dir /wheels ./clients/python ./services/common ./services/control \
    "psycopg[binary]"

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels rewardseal-control "psycopg[binary]"
COPY --chmod=0755 deploy/docker/healthcheck.py /usr/local/bin/rewardseal-healthcheck
# A fixed non-root uid/gid (10001) so volumes and Kubernetes securityContexts can name it.
RUN groupadd --system --gid 10001 rewardseal \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/rewardseal \
        --shell /usr/sbin/nologin rewardseal \
    && install -d -o 10001 -g 10001 -m 0700 /var/lib/rewardseal /var/lib/rewardseal/control
USER 10001:10001
WORKDIR /var/lib/rewardseal
EXPOSE 8791
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=3 \
    CMD ["rewardseal-healthcheck", "grpc", "127.0.0.1:8791"]
# The same entry point `make up` runs (tools/stack.py); compose and Kubernetes pass their own
# arguments. Tokens come from REWARDSEAL_CONTROL_ADMIN_TOKEN / REWARDSEAL_CONTROL_TOKEN /
# REWARDSEAL_CONTROL_WORKER_TOKEN (or 0600 files made in the data directory), the database from
# REWARDSEAL_CONTROL_DB_URL.
CMD ["rewardseal-control", "serve", "--host", "0.0.0.0", "--port", "8791", \
     "--data-dir", "/var/lib/rewardseal/control"]
