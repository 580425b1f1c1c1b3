"""Authoring contract bundles for one's own system of record (``rewardseal-worker contract``).

* :mod:`.templates`: the starting bundle ``contract init`` writes, per recipe kind;
* :mod:`.readme`: the README that explains it (JSON documents bound by digest hold no comments);
* :mod:`.schema_check`: the JSON Schema of each bundle file (package data) and its check;
* :mod:`.commands`: ``contract init|check|seal|show``.
"""
