"""TFLM's offline memory plan, the one place its `OfflineMemoryAllocation` words are read or written.

The metadata entry named `OfflineMemoryAllocation` points at a buffer of little-endian int32 words
`[version, subgraph count, n, offset_0 .. offset_{n-1}]`: one offset per tensor of every subgraph, concatenated in
subgraph order, bytes from the 16-aligned start of the arena head, -1 meaning "TFLM plans this tensor itself"
(micro_allocation_info.cc, GetOfflinePlannedOffsets). TFLM checks only that n equals the tensor count; everything
else is checked by the validator, since a bad offset makes TFLM crash or corrupt outputs.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

NAME = "OfflineMemoryAllocation"
VERSION = 1  # what TFLM's own tests write; TFLM does not read it
ONLINE = -1  # offset word: TFLM's planner places this tensor
HEADER_WORDS = 3  # version, subgraph count, n
WORD_BYTES = 4


class PlanFormatError(ValueError):
    """The metadata bytes are not a plan: the reason, phrased for the user."""


@dataclass(frozen=True)
class OfflinePlan:
    version: int
    subgraph_count: int
    offsets: tuple[int, ...]  # per tensor of all subgraphs, concatenated; ONLINE = planned by TFLM

    @classmethod
    def decode(cls, data: bytes) -> OfflinePlan:
        if len(data) < HEADER_WORDS * WORD_BYTES:
            raise PlanFormatError(f"has {len(data)} bytes, fewer than the {HEADER_WORDS * WORD_BYTES}-byte header")
        if len(data) % WORD_BYTES:
            raise PlanFormatError(f"has {len(data)} bytes, not a whole number of int32 words")
        version, subgraph_count, count = struct.unpack_from(f"<{HEADER_WORDS}i", data)
        words = len(data) // WORD_BYTES - HEADER_WORDS
        if count != words:
            raise PlanFormatError(f"declares {count} offsets but holds {words}")
        return cls(version, subgraph_count, struct.unpack_from(f"<{count}i", data, HEADER_WORDS * WORD_BYTES))

    @classmethod
    def from_offsets(cls, tensor_counts: Sequence[int], offsets: Mapping[tuple[int, int], int]) -> OfflinePlan:
        """The plan giving each (subgraph, tensor) in `offsets` its offset, every other tensor ONLINE."""
        bases = tensor_bases(tensor_counts)
        words = [ONLINE] * sum(tensor_counts)
        for (subgraph, tensor), offset in offsets.items():
            words[bases[subgraph] + tensor] = offset
        return cls(VERSION, len(tensor_counts), tuple(words))

    @property
    def words(self) -> tuple[int, ...]:
        return (self.version, self.subgraph_count, len(self.offsets), *self.offsets)

    def encode(self) -> bytes:
        return struct.pack(f"<{len(self.words)}i", *self.words)

    def offset(self, tensor_counts: Sequence[int], subgraph: int, tensor: int) -> int | None:
        """The fixed offset of a tensor, or None when TFLM plans it (ONLINE, or beyond a short plan)."""
        index = tensor_bases(tensor_counts)[subgraph] + tensor
        if index >= len(self.offsets) or self.offsets[index] == ONLINE:
            return None
        return self.offsets[index]

    @property
    def fixed_count(self) -> int:
        return sum(1 for o in self.offsets if o != ONLINE)


def tensor_bases(tensor_counts: Sequence[int]) -> list[int]:
    """Index in the plan of each subgraph's first tensor."""
    bases = [0]
    for count in tensor_counts[:-1]:
        bases.append(bases[-1] + count)
    return bases
