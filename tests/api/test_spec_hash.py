"""Issue 44 item 4: a read token cannot confirm a guessed env value through ``spec_hash``.

The hash is a plain SHA-256 of the stored (unmasked) spec; beside the masked spec a read token
could hash candidate specs until one matched (an 8-word dictionary found ``DB_PASSWORD``). Read
tokens get ``spec_hash: null``; admin tokens, which see the spec, keep it.
"""

from __future__ import annotations

import hashlib
import json

import httpx

from leoflow.model.spec.dag import parse_dag_spec
from tests.api.conftest import ADMIN, READ
from tests.api.test_dag_secrets import PASSWORD, _secretive, conforms


def test_a_read_token_gets_no_hash_of_the_unmasked_spec_anywhere(api_client: httpx.Client) -> None:
    doc = _secretive()
    assert api_client.post("/api/v2/dags", json=doc, headers=ADMIN).status_code == 201
    digest = parse_dag_spec(doc).spec_hash()

    admin_versions = api_client.get("/api/v2/dags/secretive/versions", headers=ADMIN).json()
    assert admin_versions["items"][0]["spec_hash"] == digest  # admins (dags versions, GitOps checks) keep it
    assert api_client.get("/api/v2/dags/secretive/versions/1", headers=ADMIN).json()["spec_hash"] == digest

    # Everything a read token can ask about the DAG: no plain SHA-256 of the spec, in any form.
    answers = {path: api_client.get(path, headers=READ) for path in (
        "/api/v2/dags", "/api/v2/dags/secretive", "/api/v2/dags/secretive/versions",
        "/api/v2/dags/secretive/versions/1", "/api/v2/dags/secretive/runs")}
    canonical = {k: v for k, v in parse_dag_spec(doc).to_canonical().items() if k != "paused"}
    spellings = {digest, digest[:12], digest.upper(),
                 hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()}
    for path, answer in answers.items():
        assert answer.status_code == 200, (path, answer.text)
        assert PASSWORD not in answer.text, path
        for spelling in spellings:
            assert spelling not in answer.text, path
    versions = answers["/api/v2/dags/secretive/versions"].json()
    assert [v["spec_hash"] for v in versions["items"]] == [None]
    assert answers["/api/v2/dags/secretive/versions/1"].json()["spec_hash"] is None
    # A sync plan (which says whether a candidate spec is "unchanged") is admin-only.
    sync = api_client.post("/api/v2/dags:sync", json={"source": "x", "dry_run": True,
                                                      "files": {"a.json": json.dumps(doc)}}, headers=READ)
    assert sync.status_code == 403, sync.text
    # The documents say so (the answers are validated against them, as schemathesis does).
    conforms(versions["items"][0], "DagVersion")
    conforms(admin_versions["items"][0], "DagVersion")
    conforms(answers["/api/v2/dags/secretive/versions/1"].json(), "DagVersionDetail")
