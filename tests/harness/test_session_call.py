"""How a chaos-session command says its failure: exit 2 when the request never reached the
session, exit 1 when the session refused it, each as ``jbodlab <command>: <why>``."""

import argparse

import pytest

from harness.cli import operator as operator_cli
from harness.cli.session_call import call_session
from harness.run.session import SessionError

pytestmark = pytest.mark.unit


def test_an_answer_that_did_it_is_handed_back(capsys):
    assert call_session("heal", lambda: {"ok": True, "healed": 2}) == ({"ok": True, "healed": 2}, 0)
    assert capsys.readouterr().err == ""


def test_a_request_that_never_reached_the_session_exits_2(capsys):
    def send():
        raise SessionError("--p: 2 must be in (0, 1]")
    assert call_session("fail-disk", send) == (None, 2)
    assert capsys.readouterr().err == "jbodlab fail-disk: --p: 2 must be in (0, 1]\n"


def test_a_refusal_exits_1_with_the_sessions_words(capsys):
    assert call_session("kill", lambda: {"ok": False, "error": "no node broker:9"}) == (None, 1)
    assert capsys.readouterr().err == "jbodlab kill: no node broker:9\n"


@pytest.mark.parametrize("name,extra,message", [
    ("reassign", {"node": "broker-1", "wait": 0.0, "no_wait": False}, "--wait: 0.0 must be > 0 (or --no-wait)"),
    ("reassign", {"node": "nobody", "wait": 5.0, "no_wait": False}, "NODE: 'nobody' is not a node"),
    ("elect", {"unclean": True}, "no chaos session at"),
])
def test_the_operator_commands_check_their_arguments_before_the_session(tmp_path, capsys, name, extra, message):
    args = argparse.Namespace(operator_command=name, session_dir=str(tmp_path / "none"), topic=None, **extra)
    assert operator_cli.run(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"jbodlab {name}: ") and message in err, err
