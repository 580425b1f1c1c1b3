# syntax=docker/dockerfile:1
# rewardseal-mockmed: MockMed, the synthetic EMR system of record (no real patient data). Build
# from the repository root (docker compose -f deploy/docker-compose.yml build does):
#
#   docker build -f deploy/docker/mockmed.Dockerfile -t rewardseal/mockmed:0.1.0 .
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
COPY services/mockmed ./services/mockmed
RUN pip wheel --wheel-dir /wheels ./clients/python ./services/common ./services/mockmed \
    "psycopg[binary]"

FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels rewardseal-mockmed "psycopg[binary]"
COPY --chmod=0755 deploy/docker/healthcheck.py /usr/local/bin/rewardseal-healthcheck
# A fixed non-root uid/gid (10001). The working directory is writable: MockMed's default
# database (sqlite:///mockmed.sqlite) lives there when MOCKMED_DB_URL is not set.
RUN groupadd --system --gid 10001 rewardseal \
    && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/rewardseal \
        --shell /usr/sbin/nologin rewardseal \
    && install -d -o 10001 -g 10001 -m 0700 /var/lib/rewardseal /var/lib/rewardseal/mockmed
USER 10001:10001
WORKDIR /var/lib/rewardseal/mockmed
EXPOSE 8792
HEALTHCHECK --interval=10s --timeout=5s --start-period=20s --retries=3 \
    CMD ["rewardseal-healthcheck", "http", "http://127.0.0.1:8792/healthz"]
# The same entry point `make up` runs (tools/stack.py). The client token comes from
# MOCKMED_TOKEN, the database from MOCKMED_DB_URL; without MOCKMED_ADMIN_TOKEN the fault switch
# is off.
CMD ["rewardseal-mockmed", "serve", "--host", "0.0.0.0", "--port", "8792"]
