-- Runs once, on an empty data volume, as POSTGRES_USER (the official image's initdb hook).
-- One database per service: POSTGRES_DB (rewardseal_control) is made by the image itself; the
-- worker's receipt store and MockMed's system of record get their own. The services create
-- their tables on start (control through its Alembic migrations).
CREATE DATABASE rewardseal_worker;
CREATE DATABASE mockmed;
