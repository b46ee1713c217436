"""Run the explorer's workload under the recorder *and* an audit hook; print what only the
hook saw (``python -m crash.guard BASE [--stray]``, from the tests folder).

The interpreter raises an audit event for every call that opens a file for writing
(``open`` through ``os.open`` or the built-in ``open``), renames, removes, creates or
removes a folder, truncates, links, changes metadata or maps a file, however the call is
made. Every one of those under the workload's folder must have gone through the recorder,
or the crash states the explorer builds would miss a change the store really made. Writes
and fsyncs raise no event, but they need a descriptor from such an open, and the recorder
refuses the ``os`` calls it cannot log (``writev``, ``sendfile``, ...).

Prints one JSON object: ``{"audited": n, "recorded": n, "unseen": [[event, path], ...]}``.
``--stray`` makes the workload also write a file with the built-in ``open`` (behind the
recorder's back), so the test can check that the guard notices.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from crash.recorder import Recorder
from crash.workload import prepare, run_workload

_EVENTS = {
    "os.rename": "rename",
    "os.remove": "remove",
    "os.mkdir": "mkdir",
    "os.rmdir": "rmdir",
    "os.truncate": "truncate",
    "os.link": "link",
    "os.symlink": "symlink",
    "os.chmod": "chmod",
    "os.chown": "chown",
    "os.utime": "utime",
    "mmap.__new__": "mmap",
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND


class Audit:
    """Collect the changing calls under ``base`` while ``active``."""

    def __init__(self, base: str) -> None:
        self.base = os.path.join(os.path.realpath(base), "")
        self.active = False
        self.seen: list[tuple[str, str]] = []

    def _path(self, value: Any, dir_fd: Any = None) -> str | None:
        if isinstance(value, int):
            try:
                return os.readlink(f"/proc/self/fd/{value}")
            except OSError:
                return None
        if not isinstance(value, str | bytes | os.PathLike):
            return None
        text = os.fsdecode(os.fspath(value))
        if isinstance(dir_fd, int) and not os.path.isabs(text):
            try:
                text = os.path.join(os.readlink(f"/proc/self/fd/{dir_fd}"), text)
            except OSError:
                return None
        return os.path.normpath(os.path.abspath(text))

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if not self.active:
            return
        if event == "open":
            path, mode, flags = args
            writes = (flags or 0) & _WRITE_FLAGS or any(c in (mode or "") for c in "wax+")
            kind = "open" if mode is None else "builtin open"
            where = self._path(path) if writes else None
        elif event in _EVENTS:
            kind = _EVENTS[event]
            if event == "mmap.__new__":
                fileno, _length, access, _offset = args
                where = self._path(fileno) if fileno != -1 and access != 1 else None
            elif event in ("os.rename", "os.link"):
                where = self._path(args[0 if event == "os.rename" else 1], args[2])
            else:
                where = self._path(args[0], args[-1] if event != "os.truncate" else None)
        else:
            return
        if where is not None and (where + os.sep).startswith(self.base):
            self.seen.append((kind, where))


def main(argv: list[str]) -> None:
    base = Path(argv[0])
    stray = "--stray" in argv
    prepare(base)
    audit = Audit(str(base))
    sys.addaudithook(audit)
    recorder = Recorder(str(base))

    async def workload(folder: Path, active: Recorder) -> None:
        await run_workload(folder, active)
        if stray:
            with open(folder / "save" / "stray.bin", "wb") as handle:
                handle.write(b"written behind the recorder's back")

    audit.active = True
    with recorder.active():
        asyncio.run(workload(base, recorder))
    audit.active = False
    unseen = Counter(audit.seen) - Counter(recorder.calls)
    result = {
        "audited": len(audit.seen),
        "recorded": len(recorder.calls),
        "unseen": sorted([kind, path] for kind, path in unseen.elements()),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
