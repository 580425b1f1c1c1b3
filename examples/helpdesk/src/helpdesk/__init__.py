"""A worked example of bringing one's own system of record to rewardseal: a synthetic helpdesk.

Customers file tickets in queues; an agent's task is "file a new ticket for this customer in
this queue and close their previous open ticket there as superseded". The package holds the
ticketing service (:mod:`.store`, :mod:`.app`, :mod:`.server`, ``python -m helpdesk serve``),
its tier-2 contract bundles over the database (``sql``) and over the API (``rest``)
(:mod:`.bundles`), scripted policies that try to get paid without doing the task
(:mod:`.policies`) and the :class:`~rewardseal.trainers.actors.EpisodeActor` that carries out a
policy's action report on the API (:mod:`.actor`). Synthetic data only.
"""

__version__ = "0.1.0"
