"""Every ``riskopt`` command and option has a help text, in plain text: no reStructuredText
markup (``double backticks``, :class:`roles`, backticks, ``::`` literal markers) leaks into
``--help``."""
import argparse
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from riskopt.cli import build_parser

RISKOPT = Path(sys.executable).with_name("riskopt")
#: reStructuredText (and Markdown) markup that must not show in a terminal
MARKUP = [(re.compile(r"``"), "double backticks"),
          (re.compile(r":[a-z]+(:[a-z]+)?:`"), "a :role:`...`"),
          (re.compile(r"`"), "a backtick"),
          (re.compile(r"::\s*$", re.MULTILINE), "a '::' literal-block marker")]


def _walk(parser, path=()):
    """``(command path, parser, help line in the parent)`` of every command, depth first."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            lines = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                assert lines.get(name), f"'riskopt {' '.join(path + (name,))}' has no help " \
                                        "line in its parent's command list"
                yield from _walk(sub, path + (name,))


COMMANDS = list(_walk(build_parser()))


def _name(path):
    return " ".join(("riskopt",) + path)


def test_the_walk_finds_every_command():
    names = {_name(p) for p, _ in COMMANDS}
    for cmd in ("riskopt", "riskopt fit", "riskopt predict", "riskopt evaluate",
                "riskopt bench run", "riskopt bench plot", "riskopt bench report",
                "riskopt bench reproduce", "riskopt bench list", "riskopt bench show",
                "riskopt datasets list", "riskopt datasets info"):
        assert cmd in names


@pytest.mark.parametrize("path, parser", COMMANDS, ids=[_name(p) for p, _ in COMMANDS])
def test_every_option_has_a_plain_text_help(path, parser, monkeypatch):
    monkeypatch.setenv("COLUMNS", "100")
    assert parser.description and parser.description.strip(), f"{_name(path)}: no description"
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction,
                               argparse._SubParsersAction)):
            continue
        what = "/".join(action.option_strings) or action.dest
        assert action.help and action.help is not argparse.SUPPRESS and action.help.strip(), \
            f"{_name(path)}: {what} has no help text"
    text = parser.format_help()
    for pattern, desc in MARKUP:
        m = pattern.search(text)
        assert m is None, (f"{_name(path)} --help shows {desc}: "
                           f"...{text[max(m.start() - 60, 0):m.end() + 20]}...")


@pytest.mark.parametrize("argv", [["fit"], ["evaluate"], ["bench", "reproduce"]])
def test_the_console_script_prints_the_same_help(argv):
    if not RISKOPT.exists():
        pytest.skip("the riskopt console script is not installed next to this python")
    out = subprocess.run([str(RISKOPT), *argv, "--help"], capture_output=True, text=True,
                         timeout=120, env={**os.environ, "COLUMNS": "100"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: riskopt " + " ".join(argv))
    assert "`" not in out.stdout
