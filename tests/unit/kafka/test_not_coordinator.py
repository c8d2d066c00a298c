"""A group request sent to a listener that does not coordinate groups (any but the head's) is
answered NOT_COORDINATOR in the shape of every group API and version served, so the client looks
for the coordinator again instead of losing its connection (no Ray)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from kio.schema.errors import ErrorCode

from raylog.kafka import broker_api, frames

CASES = [(key, version) for key in sorted(broker_api.GROUP_APIS)
         for version in range(frames.SUPPORTED[key][0], frames.SUPPORTED[key][1] + 1)]


@pytest.mark.parametrize("api_key,version", CASES)
def test_every_group_api_gets_not_coordinator_in_its_own_shape(api_key, version):
    cls = frames.response_class(api_key, version)
    topics = [SimpleNamespace(name="t", partitions=[SimpleNamespace(partition_index=0)])]
    body = SimpleNamespace(**{15: {"groups": ["g"]}, 69: {"group_ids": ["g"]}, 42: {"groups_names": ["g"]},
                              8: {"topics": topics},
                              9: {"topics": topics} if version < 8 else  # v8 on: a batch of groups
                              {"groups": [SimpleNamespace(group_id="g", topics=topics)]},
                              47: {"topics": topics}}.get(api_key, {}))
    answer = broker_api._not_coordinator(cls, body)
    frames.encode_response(api_key, version, 7, answer)
    codes = [getattr(answer, "error_code", None)]
    codes += [g.error_code for g in getattr(answer, "groups", ()) or ()]
    codes += [r.error_code for r in getattr(answer, "results", ()) or ()]
    codes += [p.error_code for t in getattr(answer, "topics", ()) or () for p in t.partitions]
    assert ErrorCode.not_coordinator in codes and set(codes) <= {ErrorCode.not_coordinator, None}
