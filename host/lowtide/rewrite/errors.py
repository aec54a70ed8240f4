"""Why a rewrite does not apply to one place of a graph."""

from __future__ import annotations

from lowtide.errors import LowtideError


class NotApplicable(LowtideError):
    """This rewrite does not fit this part of the graph (no such structure, a region too small for the grid, ...).

    A search that tries several candidates catches exactly this and keeps the message as the candidate's reason;
    asked for directly, it is a one-line error for the user like any LowtideError. Anything else a rewrite raises
    is a real error and propagates."""
