"""The control plane's domain layer: its rules as plain classes over the store.

The gRPC servicers (``rewardseal_control.service``), the operator console
(``rewardseal_control.console``) and the command line call these; none of them imports grpc.
Each class applies its rules, runs the synchronous store in a worker thread (the store must not
stall the event loop), logs one line per event (the ``rewardseal_control.domain`` logger), and
returns store or core types; errors are :mod:`rewardseal.core.errors` classes.

* :mod:`.contracts`: registering a contract under the digest the caller states (R-C-1);
* :mod:`.keys`: issuer keys: registration with proof of possession, admission and bindings,
  enrollments, retirement (R-C-2, R-C-7, R-C-10, R-C-11);
* :mod:`.issuing`: the issuing rules and the signature of a certificate (R-C-3, R-MSG-5,
  R-CAL-4, R-C-13);
* :mod:`.revocation`: the revocation publisher: revoking, keeping the signed list fresh and
  pushing each new head to watchers (R-C-4, R-C-13);
* :mod:`.receipts`: the receipt index's intake: open each receipt against the worker keys, then
  the index's checks (R-C-5, R-C-10);
* :mod:`.attestation`: reward attestations for model checkpoints, signed by the organization
  key (R-C-15);
* :mod:`.parts`: :class:`~.parts.DomainPart`, what issuing, keys and revocation are made with;
* :mod:`.plane`: :class:`ControlPlane`, which composes them over one store, key and clock.
"""

from __future__ import annotations

from rewardseal_control.domain.plane import ControlPlane

__all__ = ["ControlPlane"]
