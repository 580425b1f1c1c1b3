"""Server plumbing shared by the rewardseal services: the worker, the control plane and MockMed.

* :mod:`rewardseal_server.sqlstore`: SQL engines (SQLite and PostgreSQL) set up one way;
* :mod:`rewardseal_server.serving`: gRPC servers (limits, health, reflection, signals, ports);
* :mod:`rewardseal_server.service_settings`: data directories, ports, bearer tokens, server TLS;
* :mod:`rewardseal_server.auth`: the bearer-token interceptor;
* :mod:`rewardseal_server.localstack`: starting and stopping local service processes;
* :mod:`rewardseal_server.integrity_audit`: reward-integrity audits (metrics, bootstrap, trends,
  the decision table), which only the control plane runs.

A separate distribution (``rewardseal-server``) so that a trainer, which installs ``rewardseal``
only, never pulls in SQLAlchemy, server code or the audit statistics. It imports the core rules
(:mod:`rewardseal`) and nothing of the services; the import contracts in the root
``pyproject.toml`` hold that.
"""
