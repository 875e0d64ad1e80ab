"""The command line runs its command with the cyclic collector's youngest generation collected every
``GC_YOUNG`` allocations (not CPython's 700), and gives the caller back its own setting."""

from __future__ import annotations

import gc
from types import SimpleNamespace

import forestcoll.cli as cli_mod


def _parser_running(seen: list, result=0):
    def func(_args):
        seen.append(gc.get_threshold())
        if isinstance(result, BaseException):
            raise result
        return result
    return lambda _only=None: SimpleNamespace(parse_args=lambda _words: SimpleNamespace(func=func))


def test_a_command_runs_with_fewer_young_collections_and_the_setting_comes_back(monkeypatch):
    was = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)
        seen: list = []
        monkeypatch.setattr(cli_mod, "build_parser", _parser_running(seen))
        assert cli_mod.main(["bound", "x"]) == 0
        assert seen == [(cli_mod.GC_YOUNG, 10, 10)] and gc.get_threshold() == (700, 10, 10)
        # a bug in the command (exit 1) and a user's error (exit 2) restore it too
        from forestcoll.errors import UsageError
        for exc, code in ((RuntimeError("x"), 1), (UsageError("y"), 2)):
            monkeypatch.setattr(cli_mod, "build_parser", _parser_running(seen, exc))
            assert cli_mod.main(["bound", "x"]) == code
            assert gc.get_threshold() == (700, 10, 10)
        # a caller that already collects more rarely keeps its setting
        gc.set_threshold(500_000, 20, 30)
        monkeypatch.setattr(cli_mod, "build_parser", _parser_running(seen))
        cli_mod.main(["bound", "x"])
        assert seen[-1] == (500_000, 20, 30) and gc.get_threshold() == (500_000, 20, 30)
    finally:
        gc.set_threshold(*was)
