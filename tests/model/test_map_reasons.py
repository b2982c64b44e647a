"""What a mapped task's failure reason says when its source resolves to something unusable at run
time (``leoflow.model.spec.mapping.resolve``): the reason is all an operator sees, so it names the
value, not only its type."""

from __future__ import annotations

import pytest

from leoflow.model.spec.mapping import MapFailed, SourceFacts, parse_map_over, resolve


@pytest.mark.parametrize(("conf", "words"), [({"n": 10_001}, "10,001; at most 10,000"), ({"n": "3"}, "got string")])
def test_a_count_from_a_param_that_is_not_usable_fails_naming_why(conf: dict[str, object], words: str) -> None:
    source = parse_map_over({"count": "{{ params.n }}"}, "tasks[0].map_over")
    with pytest.raises(MapFailed, match=words):
        resolve(source, SourceFacts(conf), "process")


def test_a_negative_count_names_the_number() -> None:
    source = parse_map_over({"count": "{{ params.n }}"}, "tasks[0].map_over")
    with pytest.raises(MapFailed, match="got -1"):
        resolve(source, SourceFacts({"n": -1}), "process")
