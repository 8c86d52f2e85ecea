"""Reading the text files users give the CLI and the service (cluster dumps, workloads, traces)."""
from __future__ import annotations

from pathlib import Path


def one_line(error: Exception) -> str:
    """An error's message on one line (YAML parser messages span several)."""
    return "; ".join(line.strip() for line in str(error).strip().splitlines() if line.strip())


def read_text(path: str | Path, what: str, error: type[Exception]) -> str:
    """The file's text; `error` naming the file when it cannot be read or is not UTF-8."""
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise error(f"cannot read {what} {path}: {err.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise error(f"{what} {path} is not UTF-8 text (byte {err.start} is 0x{data[err.start]:02x}); "
                    f"expected UTF-8 YAML or JSON") from None
