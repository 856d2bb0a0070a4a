"""The archive's named errors; each message says what to do."""

from __future__ import annotations


class ArchiveError(Exception):
    """Something about the archive is wrong or cannot be done; the message says what to do."""


class ArchiveNotFoundError(ArchiveError, FileNotFoundError):
    """The archive root does not exist (and was not to be created)."""


class UnknownBootError(ArchiveError, LookupError):
    """No boot matches the given sequence number, index or launch id."""


class BootSealedError(ArchiveError):
    """The boot already has a manifest; sealed boots never change."""


class BootIncompleteError(ArchiveError):
    """The boot's boot.json expects files that are not there yet; it cannot be sealed."""

    def __init__(self, message: str, missing: list[str]):
        super().__init__(message)
        self.missing = missing


class UnsafePathError(ArchiveError):
    """A symlink or special file where the archive expects a plain folder or file."""


class InvalidNameError(ArchiveError, ValueError):
    """A file name that would escape the boot folder or collide with the archive's own names."""
