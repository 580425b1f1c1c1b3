"""The worker's HTTP/JSON face (docs/spec.md §13, R-H-1/R-H-2; docs/http.md).

Existing trainer code that POSTs episodes to a reward endpoint trains against rewardseal
unmodified. The face runs in the worker's own process and event loop, beside the gRPC server,
and calls the same :class:`~rewardseal_worker.engine.Scorer` (one batcher, one store, one set
of rules): every module here only translates.

* :mod:`.shapes`: request bodies to descriptors and begin requests, receipts to their JSON view;
* :mod:`.responses`: rewardseal errors to HTTP statuses and ``{"error", "detail"}`` bodies;
* :mod:`.guards`: the body-size limit, the content type and the bearer token;
* :mod:`.routes`: the FastAPI application and its routes.

The grader route and the gRPC ``GradeOpenAI`` share :mod:`rewardseal_worker.grading`; neither
face imports the other. Uvicorn serves :func:`.routes.create_app` on the worker's event loop:
:mod:`rewardseal_worker.app` starts it with
:func:`rewardseal_server.embedded_http.start_http_server`.
"""
