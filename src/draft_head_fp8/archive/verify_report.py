"""What ``verify`` reports: each problem with the path it is about, and what was checked."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any


@dataclasses.dataclass
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


@dataclasses.dataclass
class VerifyReport:
    root: str
    problems: list[Problem] = dataclasses.field(default_factory=list)
    sealed: list[str] = dataclasses.field(default_factory=list)
    incomplete: list[str] = dataclasses.field(default_factory=list)
    notes: list[str] = dataclasses.field(default_factory=list)
    # Later records of sealed boots never sealed (a kill or a crash while one was written): a
    # kind of their own, not a damaged file, but what they held is lost, so never "ok".
    incomplete_proofs: list[Problem] = dataclasses.field(default_factory=list)
    files_checked: int = 0
    bytes_checked: int = 0
    chain: list[str] = dataclasses.field(default_factory=list)  # sealed boots in chain (seal) order
    # Incomplete boots that wait for expected files (join_boot): name -> present and missing ones.
    expected: dict[str, dict[str, list[str]]] = dataclasses.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.problems and not self.incomplete_proofs

    def add(self, path: str | Path, message: str) -> None:
        self.problems.append(Problem(str(path), message))

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "root": self.root,
            "problems": [dataclasses.asdict(p) for p in self.problems],
            "sealed": self.sealed,
            "incomplete": self.incomplete,
            "incomplete_proofs": [dataclasses.asdict(p) for p in self.incomplete_proofs],
            "chain": self.chain,
            "notes": self.notes,
            "files_checked": self.files_checked,
            "bytes_checked": self.bytes_checked,
            "expected": self.expected,
        }
