# syntax=docker/dockerfile:1
# rewardseal-worker: the reward worker (oracle reads, judging, signed receipts). Build from the
# repository root (docker compose -f deploy/docker-compose.yml build does):
#
#   docker build -f deploy/docker/worker.Dockerfile -t rewardseal/worker:0.1.0 .
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
COPY services/worker ./services/worker
# MockMed (its seeding, the MockMed contract, the ExtraDup families) for `--seed-mockmed`: compose
# seeds the synthetic bundles on first start (the worker's `mockmed` extra; no other worker code
# imports it). The kit (clients/python/kit) is not in the image: no production code imports it.
COPY services/mockmed ./services/mockmed
RUN pip wheel --wheel-dir /wheels ./clients/python ./services/common ./services/worker \
    ./services/mockmed "psycopg[binary]"

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels rewardseal-worker rewardseal-mockmed \
        "psycopg[binary]"
COPY --chmod=0755 deploy/docker/healthcheck.py /usr/local/bin/rewardseal-healthcheck
# A fixed non-root uid/gid (10001) so volumes and Kubernetes securityContexts can name it. The
# data directory holds the worker's Ed25519 key (keys/, 0600) and seeded files: mount a volume.
RUN groupadd --system --gid 10001 rewardseal \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/rewardseal \
        --shell /usr/sbin/nologin rewardseal \
    && install -d -o 10001 -g 10001 -m 0700 /var/lib/rewardseal /var/lib/rewardseal/worker
USER 10001:10001
WORKDIR /var/lib/rewardseal
EXPOSE 8790
# --seed-mockmed calibrates on first start: give it time before failures count.
HEALTHCHECK --interval=10s --timeout=5s --start-period=180s --retries=3 \
    CMD ["rewardseal-healthcheck", "grpc", "127.0.0.1:8790"]
# The same entry point `make up` runs (tools/stack.py); compose and Kubernetes pass their own
# arguments. The token comes from REWARDSEAL_WORKER_TOKEN (or a 0600 file in the data
# directory), the receipt store from REWARDSEAL_WORKER_DB_URL.
CMD ["rewardseal-worker", "serve", "--host", "0.0.0.0", "--port", "8790", \
     "--data-dir", "/var/lib/rewardseal/worker"]
