"""The layers of docs/architecture.md, enforced: import-linter checks the contracts in pyproject.toml
([tool.importlinter]) on every `pytest` run, so an import that crosses a boundary fails the suite."""
import os
from pathlib import Path

from importlinter import cli     # import-linter: in the test extras (pyproject.toml)

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold(capsys):
    cwd = os.getcwd()
    os.chdir(ROOT)                     # the contracts name top-level packages, found from the repository root
    try:
        code = cli.lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True)
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out
    assert code == 0, out


def test_a_broken_contract_fails(tmp_path, capsys):
    """The check can fail: a contract that forbids what the engine does import is reported broken."""
    config = tmp_path / "contracts.ini"
    config.write_text("[importlinter]\nroot_packages =\n    app\n\n[importlinter:contract:probe]\n"
                      "name = probe\ntype = forbidden\nsource_modules =\n    app.scheduling\n"
                      "forbidden_modules =\n    app.state\n")
    cwd = os.getcwd()
    os.chdir(ROOT)
    try:
        code = cli.lint_imports(config_filename=str(config), no_cache=True, no_logo=True)
    finally:
        os.chdir(cwd)
    assert code != 0 and "app.scheduling" in capsys.readouterr().out
