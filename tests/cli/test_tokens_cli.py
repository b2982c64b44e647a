"""``leoflow tokens``: the secret alone on stdout (for scripts), usable at once, gone after revoke."""

from __future__ import annotations

import json

import httpx
import pytest

from leoflow.api.app import create_app
from leoflow.cli.main import main
from tests.api.conftest import ADMIN_TOKEN, api_settings
from tests.api.live import serve


def test_create_list_revoke(database_url: str, monkeypatch: pytest.MonkeyPatch,
                            capsys: pytest.CaptureFixture[str]) -> None:
    with serve(create_app(api_settings(database_url))) as url:
        monkeypatch.setenv("LEOFLOW_URL", url)
        monkeypatch.setenv("LEOFLOW_TOKEN", ADMIN_TOKEN)
        assert main(["tokens", "create", "ci-bot", "--role", "viewer", "--expires-in-days", "30"]) == 0
        out, err = capsys.readouterr()
        secret = out.strip()
        assert secret.startswith("lft_") and "\n" not in secret and secret not in err
        assert "shown this once" in err
        assert httpx.get(f"{url}/api/v2/dags", headers={"Authorization": f"Bearer {secret}"}).status_code == 200
        assert main(["tokens", "list"]) == 0
        listed, _ = capsys.readouterr()
        assert "ci-bot" in listed and secret[:12] in listed and secret not in listed
        assert main(["tokens", "list", "--output", "json"]) == 0
        token_id = json.loads(capsys.readouterr()[0])[0]["id"]
        assert main(["tokens", "revoke", token_id]) == 0
        capsys.readouterr()
        assert httpx.get(f"{url}/api/v2/dags", headers={"Authorization": f"Bearer {secret}"}).status_code == 401
        assert main(["tokens", "create", "ci-bot", "--role", "viewer", "--expires-in-days", "9999"]) != 0
        _, err = capsys.readouterr()
        assert "expires_in_days" in err and "Traceback" not in err
