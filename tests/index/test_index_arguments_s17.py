"""``FileVectorMemoryIndex`` refuses a folder or a lock timeout it cannot use, at once.

Found by an audit of the public API: ``lock_timeout`` ``nan``, ``inf`` or ``"5"`` was
accepted, and every append's vector then failed later with only a diagnostic, the rebuild
blaming "an unwritable index folder"; ``None`` raised a raw ``TypeError`` and ``""`` took
the current folder as the index.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from game_memory import FileGameMemoryStore, FileVectorMemoryIndex, InvalidArgumentError


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), "5", True, 0, -1, 3_601])
def test_a_lock_timeout_it_cannot_wait_is_refused(tmp_path: Path, timeout: object) -> None:
    with pytest.raises(InvalidArgumentError, match="lock_timeout"):
        FileVectorMemoryIndex(tmp_path / "index", lock_timeout=timeout)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="lock_timeout"):
        FileGameMemoryStore(tmp_path / "save", lock_timeout=timeout)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("folder", "said"),
    [
        (None, "not NoneType"),
        (5, "not int"),
        (b"/x", "not bytes"),
        ("", "empty path"),
        ("  ", "empty path"),
        ("in\0dex", "NUL"),
    ],
)
def test_a_folder_that_names_none_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, folder: object, said: str
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidArgumentError, match=said):
        FileVectorMemoryIndex(folder)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=said):
        FileGameMemoryStore(folder)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []  # nothing written in the current folder


def test_a_whole_number_of_seconds_is_a_lock_timeout(tmp_path: Path) -> None:
    FileVectorMemoryIndex(tmp_path / "index", lock_timeout=5)
    FileVectorMemoryIndex(tmp_path / "index", lock_timeout=0.5)
