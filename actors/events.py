"""Pure: the operational events a change of one partition's metadata expresses.

The controller derives these from each ``partition_changed`` record it commits (the partition
before and after), logs them (raylog/logs.py's ``event=`` lines) and counts them
(actors/metrics.py). No Ray, no I/O.
"""

from __future__ import annotations

NO_LEADER = -1

ELECTION = "election"
OFFLINE = "partition_offline"
ISR_SHRINK = "isr_shrink"
ISR_EXPAND = "isr_expand"
REASSIGNMENT_STARTED = "reassignment_started"
REASSIGNMENT_COMPLETED = "reassignment_completed"


def partition_events(before: dict, after: dict) -> list[tuple[str, dict]]:
    """(event, fields) for each change from ``before`` to ``after`` (controller_state's partition
    dicts), in the order an operator reads them: the reassignment, the ISR, then the leader."""
    events = []
    if after["adding"] and not before["adding"]:
        events.append((REASSIGNMENT_STARTED, {"adding": after["adding"], "removing": after["removing"]}))
    elif before["adding"] and not after["adding"]:
        events.append((REASSIGNMENT_COMPLETED, {
            "replicas": [r["replica_id"] for r in after["replicas"]], "removed": before["removing"]}))
    old_isr, new_isr = set(before["isr"]), set(after["isr"])
    if new_isr < old_isr:
        events.append((ISR_SHRINK, {"isr": sorted(new_isr), "removed": sorted(old_isr - new_isr)}))
    elif new_isr > old_isr:
        events.append((ISR_EXPAND, {"isr": sorted(new_isr), "added": sorted(new_isr - old_isr)}))
    elif new_isr != old_isr:
        events.append((ISR_SHRINK, {"isr": sorted(new_isr), "removed": sorted(old_isr - new_isr)}))
        events.append((ISR_EXPAND, {"isr": sorted(new_isr), "added": sorted(new_isr - old_isr)}))
    if after["leader_epoch"] != before["leader_epoch"] or after["leader"] != before["leader"]:
        kind = OFFLINE if after["leader"] == NO_LEADER else ELECTION
        events.append((kind, {"leader": after["leader"], "leader_epoch": after["leader_epoch"],
                              "previous_leader": before["leader"], "isr": sorted(new_isr)}))
    return events
