"""The layers of docs/architecture.md, enforced: import-linter checks the contracts in pyproject.toml
([tool.importlinter]) on every `pytest` run, so an import that crosses a boundary fails the suite.
It runs in a child process: import-linter reconfigures logging (it disables the loggers already made)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = "import sys; from importlinter import cli; sys.exit(cli.lint_imports(config_filename=sys.argv[1], no_cache=True))"


def lint_imports(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RUN, str(config)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_the_import_contracts_hold():
    result = lint_imports(ROOT / "pyproject.toml")
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_broken_contract_fails(tmp_path):
    """The check can fail: a contract that forbids what the engine does import is reported broken."""
    config = tmp_path / "contracts.ini"
    config.write_text("[importlinter]\nroot_packages =\n    app\n\n[importlinter:contract:probe]\n"
                      "name = probe\ntype = forbidden\nsource_modules =\n    app.scheduling\n"
                      "forbidden_modules =\n    app.state\n")
    result = lint_imports(config)
    assert result.returncode != 0 and "app.scheduling is not allowed to import app.state" in result.stdout


def test_every_module_imports():
    """A module left importing a path that moved (a merge of work done before the reshape) fails here, not
    only when its command first runs (import-linter skips imports of modules that do not exist)."""
    import importlib
    import pkgutil

    failures = []
    for package in ("topology", "grouper", "app"):
        root = importlib.import_module(package)
        for module in pkgutil.walk_packages(root.__path__, package + "."):
            try:
                importlib.import_module(module.name)
            except Exception as err:  # noqa: BLE001 - every failure is reported
                failures.append(f"{module.name}: {type(err).__name__}: {err}")
    assert not failures, "\n".join(failures)
