"""A bad setting, given as a flag or as its TAS_* variable, is one line naming both and what is valid."""
from __future__ import annotations

import pytest

from app.cli import build_parser, main
from app.settings import Settings, expected_values, setting_names

CHECKED = [field for field in Settings.model_fields if expected_values(field)]


def serve(capsys, *argv: str) -> tuple[int, list[str]]:
    code = main(["serve", *argv])
    return code, [line for line in capsys.readouterr().err.splitlines() if line.strip()]


@pytest.mark.parametrize("argv, env, line", [
    (["--port", "99999"], {}, "error: --port (TAS_PORT): '99999' is not valid; expected an integer from 1 to 65535"),
    ([], {"TAS_PORT": "abc"}, "error: --port (TAS_PORT): 'abc' is not valid; expected an integer from 1 to 65535"),
    (["--reservation-ttl", "-5"], {},
     "error: --reservation-ttl (TAS_RESERVATION_TTL): '-5' is not valid; expected a number over 0"),
    (["--native-gate", "maybe"], {},
     "error: --native-gate (TAS_NATIVE_GATE): 'maybe' is not valid; expected one of auto, on, off"),
    ([], {"TAS_LEADER_ELECT": "perhaps"},
     "error: --leader-elect (TAS_LEADER_ELECT): 'perhaps' is not valid; expected true or false"),
    (["--strategy", "random"], {},
     "error: --strategy (TAS_STRATEGY): strategy 'random' is not valid; valid strategies: binpack, spread"),
])
def test_a_bad_setting_names_the_flag_the_variable_and_the_valid_values(capsys, monkeypatch, argv, env, line):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert serve(capsys, *argv) == (2, [line])


@pytest.mark.parametrize("field", CHECKED)
def test_every_setting_with_a_type_says_so_from_its_flag_and_its_variable(capsys, monkeypatch, field):
    names = setting_names(field)
    code, lines = serve(capsys, f"--{field.replace('_', '-')}", "bogus")
    assert code == 2 and lines == [f"error: {names}: 'bogus' is not valid; expected {expected_values(field)}"]
    monkeypatch.setenv(f"TAS_{field.upper()}", "bogus")
    assert serve(capsys) == (2, lines)


def test_every_setting_is_a_flag_of_the_same_name():
    """setting_names tells the user `--<field>`: serve must have that flag for every field."""
    serve_parser = next(a for a in build_parser()._actions if a.dest == "command").choices["serve"]
    flags = {option for action in serve_parser._actions for option in action.option_strings}
    assert {setting_names(field).split()[0] for field in Settings.model_fields} <= flags


def test_help_still_lists_the_choices(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert "--native-gate {auto,on,off}" in capsys.readouterr().out
