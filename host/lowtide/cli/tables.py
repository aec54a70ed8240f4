"""Tables for a terminal: every command's table, readable at any width with the same content.

A column says what its cells are (`Kind`), and the widths are laid out here, for the console's width, before rich
draws the table: a figure is never wrapped or cut, plain text wraps between its words, a name (a tensor's, a
path) folds onto several lines, and a decorative bar shrinks, then goes, before anything else gives way. Where that
is still too wide, the rules between the columns go (two spaces part them); then the table is turned on its side:
each row becomes a column, as many rows to a table as fit. Nothing is ever cut with "…".
"""

from __future__ import annotations

import enum
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, JustifyMethod, RenderResult
from rich.table import Table
from rich.text import Text

WORD_FOLDS_AFTER = 24  # a word of plain text longer than this is no figure but a path: it may fold
NAME_FOLDS_AFTER = 12  # a name keeps this much of itself on one line before it folds
TEXT_LEAST = 10  # text wraps into no narrower a column than this (a list of ranges, not a word a line)
BAR_WIDTH = 30  # a whole bar (fraction 1.0)
BAR_LEAST = 5  # a bar narrower than this is not drawn: its column keeps only its notes


class Kind(enum.Enum):
    FIGURE = "figure"  # a number with its unit ("12,345 B", "+1.5%"): never wrapped, never cut
    TEXT = "text"  # words, each kept whole (a word longer than WORD_FOLDS_AFTER folds)
    NAME = "name"  # a tensor's, an operator's or a file's name: folds onto several lines
    BAR = "bar"  # decoration (cells are `Bar`s): shrinks, then goes, before any other column gives way


@dataclass(frozen=True)
class Column:
    header: str = ""
    kind: Kind = Kind.TEXT
    justify: JustifyMethod | None = None  # default: figures right, the rest left
    style: str | None = None


@dataclass(frozen=True)
class Bar:
    """A bar of `fraction` of the bar column's width, and a note after it, which stays when the bar goes."""

    fraction: float
    note: str = ""


@dataclass(frozen=True)
class _Cell:
    text: Text
    kind: Kind
    fraction: float | None = None  # a bar's

    @property
    def widest_line(self) -> int:
        return max((cell_len(line) for line in self.text.plain.split("\n")), default=0)

    @property
    def natural(self) -> int:
        """Its width on one line: a bar's whole, then its note."""
        if self.kind is Kind.BAR:
            return BAR_WIDTH + _noted(self.widest_line)
        return self.widest_line

    def floor(self, bar_drawn: bool) -> int:
        """The narrowest it goes without cutting what must stay whole (a bar's note stays, its bar may go)."""
        if self.kind is Kind.FIGURE:
            return self.natural
        if self.kind is Kind.BAR:
            return BAR_LEAST + _noted(self.widest_line) if bar_drawn else self.widest_line
        longest = max((cell_len(word) for word in self.text.plain.split()), default=0)
        if self.kind is Kind.NAME:
            return min(longest, NAME_FOLDS_AFTER)
        return min(self.natural, max(min(longest, WORD_FOLDS_AFTER), TEXT_LEAST))


def _noted(note: int) -> int:
    """The width a note of `note` columns takes after a bar: a space, then the note."""
    return note + 1 if note else 0


def _cell(value: str | Bar, kind: Kind) -> _Cell:
    if isinstance(value, Bar):
        return _Cell(Text(value.note), Kind.BAR, value.fraction)
    return _Cell(Text.from_markup(value), kind)


class TerminalTable:
    """A table whose cells stay whole at the console's width; print it like any rich renderable."""

    def __init__(
        self,
        *columns: Column,
        title: str | None = None,
        title_justify: JustifyMethod = "center",
        show_header: bool = True,
        ruled: bool = True,  # rules around and between the cells (else two spaces between columns)
    ) -> None:
        self.columns = columns
        self.title = title
        self.title_justify: JustifyMethod = title_justify
        self.show_header = show_header
        self.ruled = ruled
        self.headers = [_Cell(Text.from_markup(c.header), Kind.NAME) for c in columns]  # headers wrap freely
        self.rows: list[list[_Cell]] = []
        self.styles: list[str | None] = []

    def add_row(self, *cells: str | Bar, style: str | None = None) -> None:
        if len(cells) != len(self.columns):
            raise ValueError(f"a row of {len(cells)} cells in a table of {len(self.columns)} columns")
        self.rows.append([_cell(value, column.kind) for value, column in zip(cells, self.columns)])
        self.styles.append(style)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self._tables(options.max_width)

    def _tables(self, width: int) -> Iterator[Table]:
        everything = range(len(self.columns))
        # Without bars a bar column stays for its notes only, if it has any.
        kept = [
            i for i in everything if self.columns[i].kind is not Kind.BAR or any(r[i].text.plain for r in self.rows)
        ]
        for columns, bar_drawn, ruled in (
            (everything, True, self.ruled),
            (kept, False, self.ruled),
            (kept, False, False),
        ):
            widths = self._widths(columns, width, bar_drawn, ruled)
            if widths is not None:
                yield self._table(columns, widths, bar_drawn, ruled)
                return
        yield from self._turned(kept, width)

    def _column_cells(self, i: int) -> list[_Cell]:
        return ([self.headers[i]] if self.show_header else []) + [row[i] for row in self.rows]

    def _widths(self, kept: Sequence[int], width: int, bar_drawn: bool, ruled: bool) -> list[int] | None:
        """Each kept column's width (without its padding), or None where their floors alone are too wide."""
        cells = [self._column_cells(i) for i in kept]
        floors = [max((c.floor(bar_drawn) for c in column), default=0) for column in cells]
        naturals = [max(floor, max((c.natural for c in column), default=0)) for floor, column in zip(floors, cells)]
        bars = [self.columns[i].kind is Kind.BAR for i in kept]
        if not bar_drawn:
            naturals = [floor if bar else natural for floor, natural, bar in zip(floors, naturals, bars)]
        # Ruled: a space each side of a cell and a rule each side of a column; else two spaces between columns.
        room = width - (3 * len(kept) + 1 if ruled else 2 * (len(kept) - 1))
        if sum(floors) > room:
            return None
        # The other columns widen towards their natural widths first, the widest held back most; bars take the rest.
        others = [(floor, natural) for floor, natural, bar in zip(floors, naturals, bars) if not bar]
        spare = room - sum(floor for floor, _, bar in zip(floors, naturals, bars) if bar)
        widened = iter(_widen(others, spare))
        widths = [0 if bar else next(widened) for bar in bars]
        spare = room - sum(widths)
        for at, (floor, natural, bar) in enumerate(zip(floors, naturals, bars)):
            if bar:
                widths[at] = max(floor, min(natural, spare))
                spare -= widths[at]
        return widths

    def _table(self, kept: Sequence[int], widths: Sequence[int | None], bar_drawn: bool, ruled: bool) -> Table:
        if ruled:
            table = Table(box=box.HEAVY_HEAD)
        else:  # a space of padding and a blank rule between columns, none at the edges
            table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
        table.title, table.title_justify, table.show_header = self.title, self.title_justify, self.show_header
        for i, width in zip(kept, widths):
            column = self.columns[i]
            justify = column.justify or ("right" if column.kind is Kind.FIGURE else "left")
            table.add_column(self.headers[i].text, justify=justify, width=width, overflow="fold", style=column.style)
        notes = {i: max((row[i].widest_line for row in self.rows), default=0) for i in kept}
        for row, style in zip(self.rows, self.styles):
            table.add_row(*(_drawn(row[i], width, bar_drawn, notes[i]) for i, width in zip(kept, widths)), style=style)
        return table

    def _turned(self, kept: Sequence[int], width: int) -> Iterator[Table]:
        """The table on its side: a column per row, headed by the row's first cell; as many rows to a table as fit."""
        first, rest = kept[0], kept[1:]
        start = 0
        while start < len(self.rows):
            end = start + 1
            while end < len(self.rows) and self._turned_part(first, rest, start, end + 1)._fits(width):
                end += 1
            part = self._turned_part(first, rest, start, end)
            every = range(len(part.columns))
            # One row too wide on its own is left to rich, whose columns fold (never "…").
            widths: Sequence[int | None] = part._widths(every, width, False, self.ruled) or [None] * len(every)
            yield part._table(every, widths, False, self.ruled)
            start = end

    def _turned_part(self, first: int, rest: Sequence[int], start: int, end: int) -> TerminalTable:
        rows = range(start, end)
        part = TerminalTable(
            Column(),
            *(Column(justify="right", style=self.styles[r]) for r in rows),
            title=self.title if start == 0 else None,
            title_justify=self.title_justify,
            ruled=self.ruled,
        )
        part.headers = [self.headers[first], *(self.rows[r][first] for r in rows)]  # the rows' names, as they are
        for i in rest:
            # A bar's cell turns into its note; the cells keep their own kinds, so figures stay whole.
            cells = [
                _Cell(c.text, Kind.TEXT if c.kind is Kind.BAR else c.kind) for c in (self.rows[r][i] for r in rows)
            ]
            part.rows.append([self.headers[i], *cells])
            part.styles.append(None)
        return part

    def _fits(self, width: int) -> bool:
        return self._widths(range(len(self.columns)), width, False, self.ruled) is not None


def _widen(columns: Sequence[tuple[int, int]], room: int) -> list[int]:
    """Widths from each (floor, natural) that sum to at most `room`: every column at least its floor, at most its
    natural width, the widest cut first (the largest cap that fits, then what is left one by one)."""
    if sum(natural for _, natural in columns) <= room:
        return [natural for _, natural in columns]
    low, high = 0, max((natural for _, natural in columns), default=0)
    while low < high:  # the largest cap under which the columns fit
        cap = (low + high + 1) // 2
        if sum(max(floor, min(natural, cap)) for floor, natural in columns) <= room:
            low = cap
        else:
            high = cap - 1
    widths = [max(floor, min(natural, low)) for floor, natural in columns]
    spare = room - sum(widths)
    for at, (_, natural) in enumerate(columns):
        if spare > 0 and widths[at] < natural:
            widths[at] += 1
            spare -= 1
    return widths


def _drawn(cell: _Cell, width: int | None, bar_drawn: bool, notes: int) -> Text:
    if cell.fraction is None or not bar_drawn or width is None:
        return cell.text
    length = width - _noted(notes)
    bar = "█" * max(1, round(length * cell.fraction)) if cell.fraction > 0 else ""
    return Text(bar + (" " + cell.text.plain if cell.text.plain else ""))
