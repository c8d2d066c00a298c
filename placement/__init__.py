"""Which node (and which directory on it) each partition replica lives on.

``policy`` is pure (chooses nodes); ``nodes`` talks to Ray (lists live nodes,
builds the scheduling options that pin a replica to its node).
"""
