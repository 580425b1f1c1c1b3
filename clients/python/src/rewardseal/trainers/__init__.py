"""Trainer integrations: the rules every trainer adapter shares, and the adapters themselves.

``rewardseal.trainers.groups`` (always importable) holds the trainer-side rules of docs/spec.md §11:
unscored samples never become 0.0 (R-T-1), ``require_certified`` (R-T-2), aligned per-sample
metadata columns (R-T-3) and per-completion episode ids (R-T-4). The adapters (``trl``,
``verl``, ``grader``) import their trainer library lazily, so the core client stays light.
"""
