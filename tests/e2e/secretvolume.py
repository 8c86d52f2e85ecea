"""A folder laid out as the kubelet lays out a mounted Secret, so that a certificate renewal reaches a process
the way it does in a pod: each key is a symlink through `..data` to a timestamped folder, and an update writes
a new folder, then swaps `..data` in one rename (a reader sees the old files or the new ones, never a mix)."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path


class SecretVolume:
    def __init__(self, folder: Path, files: dict[str, bytes]):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.write(files)

    def path(self, key: str) -> Path:
        return self.folder / key

    def write(self, files: dict[str, bytes]) -> None:
        data = self.folder / "..data"
        previous = data.resolve() if data.is_symlink() else None
        version = self.folder / f"..{time.strftime('%Y_%m_%d_%H_%M_%S')}.{time.monotonic_ns()}"
        version.mkdir()
        for key, content in files.items():
            (version / key).write_bytes(content)
        swap = self.folder / "..data_tmp"
        os.symlink(version.name, swap)
        os.replace(swap, data)
        for key in files:
            if not self.path(key).is_symlink():
                os.symlink(f"..data/{key}", self.path(key))
        if previous is not None:
            shutil.rmtree(previous)
