"""What authorization costs a request: 1,000 runtime tokens and 100 teams (target < 0.2 ms).

Measures, in this process and without HTTP, what :class:`~leoflow.api.endpoint.Endpoint` adds to
every request before its handler runs: :meth:`Authenticator.require` (a SHA-256 of the presented
secret and a lookup in the replica's token cache, or the constant-time comparison with every
static token) followed by :meth:`AccessControl.check` (the caller's grant and the DAG's team by
its longest prefix among 100 teams' 300 prefixes). The token cache is filled as a refresh fills
it; the teams come from a real teams file. The database round trip that a refresh adds at most
once per 0.25 s per replica is not per request and is not counted.

    python bench/auth_cost.py            # prints one JSON object
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

from leoflow.api.access import AccessControl, TeamsSource
from leoflow.api.auth import Authenticator
from leoflow.api.token_cache import CachedToken
from leoflow.model.access.tokens import new_secret, secret_hash
from leoflow.settings import load_settings

TOKENS = 1_000
TEAMS = 100
ROUNDS = 20_000


def _teams_file() -> str:
    lines = ["teams:"]
    for number in range(TEAMS):
        lines.append(f"  - name: team-{number}")
        lines.append(f"    dag_id_prefixes: [t{number}-, team{number}-etl-, team{number}-ml-]")
        lines.append(f"    rules: [{{group: g{number}, role: operator}}]")
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as handle:
        handle.write("\n".join(lines) + "\n")
    return handle.name


def _request(dag_id: str) -> Any:
    return SimpleNamespace(path_params={"dag_id": dag_id}, state=SimpleNamespace())


async def main() -> None:
    settings = load_settings({"LEOFLOW_DATABASE_URL": "postgresql://unused/db",
                              "LEOFLOW_API_TOKENS": f"boss:admin:{'a' * 40},reader:read:{'b' * 40}"})
    auth = Authenticator(settings.api)
    secrets_ = [new_secret() for _ in range(TOKENS)]
    expires = datetime.now(UTC) + timedelta(days=1)
    auth.tokens._by_hash = {secret_hash(s): CachedToken(f"{n:016x}", f"t{n}", f"team-{n % TEAMS}", "operator", expires)
                            for n, s in enumerate(secrets_)}
    access = AccessControl(TeamsSource(_teams_file()))
    headers = [f"Bearer {s}" for s in secrets_]
    results: dict[str, Any] = {"tokens": TOKENS, "teams": TEAMS, "rounds": ROUNDS}
    for label, header_of in (("runtime_token", lambda n: headers[n % TOKENS]),
                             ("static_token", lambda n: f"Bearer {'b' * 40}")):
        samples = []
        for number in range(ROUNDS):
            header = header_of(number)
            request = _request(f"t{number % TEAMS}-dag")
            started = time.perf_counter()
            principal = auth.require(header, "read")
            await access.check(request, principal, "read")
            samples.append(time.perf_counter() - started)
        samples.sort()
        results[label] = {"mean_us": round(statistics.fmean(samples) * 1e6, 2),
                          "p50_us": round(samples[len(samples) // 2] * 1e6, 2),
                          "p99_us": round(samples[int(len(samples) * 0.99)] * 1e6, 2)}
    print(json.dumps(results))


if __name__ == "__main__":
    asyncio.run(main())
