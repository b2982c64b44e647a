"""``dags:sync`` holds all its files to one budget: twenty alias-heavy files cost what one does.

Issue 44, item 15: each file had its own alias budget, so a 71 KB body of 20 files burned 5.8 s of
CPU in a worker thread that the request timeout cannot stop. Each file below stands for about
470,000 values (within one file's limit of 500,000); before, each was read and validated in turn
(about a second of CPU each here).
"""

from __future__ import annotations

import time

import httpx

from tests.api.conftest import ADMIN
from tests.inputs.corpus import alias_sync_file


def test_twenty_alias_heavy_files_are_refused_at_one_shared_budget_quickly(api_client: httpx.Client) -> None:
    files = [{"name": f"f{i:02}.yaml", "content": alias_sync_file(i)} for i in range(20)]
    started = time.process_time()
    answer = api_client.post("/api/v2/dags:sync", json={"source": "s", "files": files}, headers=ADMIN)
    spent = time.process_time() - started  # the server runs in this process (tests.api.live)
    assert answer.status_code == 422, answer.text[:500]
    errors = answer.json()["error"]["details"]["errors"]
    budget = [e for e in errors if "the files of this sync together stand for more than" in e["problem"]]
    assert len(budget) == 1 and budget[0]["file"] == "f01.yaml", errors
    assert len(errors) <= 2  # f00's own problem (an unknown field) and the budget; nothing read after it
    assert spent < 8.0, f"{spent:.1f} s of CPU"  # one file's worth; twenty took about 20 s before


def test_a_sync_within_the_shared_budget_applies_every_file(api_client: httpx.Client) -> None:
    files = [{"name": f"d{i}.yaml", "content": f"dag_id: d{i}\ntasks: [&t {{id: a, kind: empty}}, {{id: b, "
              f"kind: empty, depends_on: [a]}}]\n"} for i in range(3)]
    answer = api_client.post("/api/v2/dags:sync", json={"source": "s", "files": files}, headers=ADMIN)
    assert answer.status_code == 200, answer.text[:500]
    assert answer.json()["counts"]["created"] == 3
