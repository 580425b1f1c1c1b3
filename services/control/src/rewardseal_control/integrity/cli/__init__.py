"""``rewardseal-control integrity …`` (docs/integrity.md): the reward-integrity commands of the
control plane's command line (:mod:`rewardseal_control.cli`).

* :mod:`.parser`: every area, action and flag;
* :mod:`.commands`: reward systems, protocols, profiles, bindings and shards, and the dispatch;
* :mod:`.audits`: sentinel audits and their reviews.
"""
