"""Errors a user can act on. The CLI prints them as one line and exits with status 2."""

from __future__ import annotations

from pathlib import Path


class LowtideError(Exception):
    """A problem with the user's input or environment, phrased for the user."""

    def __init__(self, message: str, path: str | Path | None = None):
        self.path = str(path) if path is not None else None
        self.message = message  # without the path, for a reply that names the file elsewhere
        super().__init__(f"{self.path}: {message}" if self.path else message)


class ModelError(LowtideError):
    """The .tflite file cannot be read or is not a model lowtide understands."""
