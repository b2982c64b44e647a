"""The CLI's layout: one module per command, each declaring its command (and its help) once."""

from __future__ import annotations

import argparse
import importlib

import pytest

from leoflow.cli.main import COMMAND_MODULES, build_parser
from leoflow.cli.verbs import noun


@pytest.mark.parametrize("module", COMMAND_MODULES)
def test_each_module_declares_exactly_one_command(module: str) -> None:
    sub = argparse.ArgumentParser().add_subparsers()
    importlib.import_module(module).register(sub)
    assert len(sub.choices) == 1, f"{module} declares {sorted(sub.choices)}"


def test_the_modules_declare_different_commands_named_after_them() -> None:
    commands = [name for action in build_parser()._actions if isinstance(action, argparse._SubParsersAction)
                for name in action.choices]
    assert len(commands) == len(COMMAND_MODULES) == len(set(commands))
    # The module is named after its command; `api` is the server's (the client is client/api.py).
    assert [m.rsplit(".", 1)[1] for m in COMMAND_MODULES] == ["server" if c == "api" else c for c in commands]


def test_a_command_declared_twice_is_refused() -> None:
    sub = argparse.ArgumentParser().add_subparsers()
    noun(sub, "dags", "DAGs")
    with pytest.raises(AssertionError, match="declared twice"):
        noun(sub, "dags", "DAGs, again")
