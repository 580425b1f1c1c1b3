"""Reward integrity on the trainer's side (docs/spec.md §12): capturing samples
(:mod:`~rewardseal.trainers.integrity.capture`), buffering and feeding them to the control plane
(:mod:`~rewardseal.trainers.integrity.buffer`, :mod:`~rewardseal.trainers.integrity.feed`),
monitoring the audits (:mod:`~rewardseal.trainers.integrity.monitor`) and the gate that pauses
training at a refused boundary (:mod:`~rewardseal.trainers.integrity.gate`).
"""
