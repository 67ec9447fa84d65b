"""One synthesized bug as data: byte spans of one file with their original and replacement
text, so a manifest replays it exactly (`Mutation.apply` refuses a file whose span no longer
holds the original text). Finding mutations is authoring (`opd_gym.authoring.synth`).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass
from typing import Any

from opd_gym.errors import DatasetError

Span = tuple[int, int, int, int, str, str]  # line, col, end_line, end_col, original, new


@dataclass(frozen=True)
class Mutation:
    """One change: bytes from (line, col) to (end_line, end_col) of `path` (ast positions:
    1-based lines, UTF-8 byte columns) hold `original` and become `replacement`.

    `more` holds the further spans of a coordinated mutation (two edits in one function,
    kind `coordinated:<kind>+<kind>`), each (line, col, end_line, end_col, original,
    replacement) in the same file, apart from the first; a one-span mutation has none, and
    its key and JSON are what they were before `more` existed."""

    path: str
    function: str  # qualified name of the enclosing function, e.g. "Cls.method"
    kind: str
    line: int
    col: int
    end_line: int
    end_col: int
    original: str
    replacement: str
    more: tuple[Span, ...] = ()

    def __post_init__(self) -> None:
        """Spans read back from JSON (lists) become tuples, so a replayed mutation is equal."""
        object.__setattr__(self, "more", tuple(tuple(s) for s in self.more))

    @property
    def key(self) -> str:
        """A short stable id of the mutation (its identity in manifests and task ids)."""
        raw = json.dumps(self.record(), sort_keys=True).encode()
        return hashlib.sha256(raw).hexdigest()[:10]

    def record(self) -> dict[str, Any]:
        """The manifest's JSON of the mutation (`more` only where there is more than one span)."""
        data = asdict(self)
        if not self.more:
            del data["more"]
        else:
            data["more"] = [list(s) for s in self.more]
        return data

    @property
    def kinds(self) -> tuple[str, ...]:
        """The kinds of the edits (two for a coordinated mutation, else its own kind)."""
        group, _, parts = self.kind.partition(":")
        return tuple(parts.split("+")) if group == "coordinated" and parts else (self.kind,)

    def spans(self) -> list[Span]:
        """Every span of the change, the first one first."""
        return [(self.line, self.col, self.end_line, self.end_col, self.original,
                 self.replacement), *self.more]

    def apply(self, text: str) -> str:
        """`text` with the mutation applied; DatasetError if a span does not hold its original."""
        data = text.encode("utf-8")
        starts = _line_starts(data, max(s[2] for s in self.spans()))
        cuts: list[tuple[int, int, str]] = []
        for line, col, end_line, end_col, original, replacement in self.spans():
            if end_line > len(starts):
                raise DatasetError(f"{self.path}: mutation {self.key} lies past the end of "
                                   "the file")
            start, end = starts[line - 1] + col, starts[end_line - 1] + end_col
            if data[start:end].decode("utf-8", "replace") != original:
                raise DatasetError(f"{self.path}: mutation {self.key} does not match the file "
                                   f"(expected {original!r} at line {line})")
            cuts.append((start, end, replacement))
        cuts.sort()
        if any(a[1] > b[0] for a, b in zip(cuts, cuts[1:], strict=False)):
            raise DatasetError(f"{self.path}: mutation {self.key} has overlapping spans")
        for start, end, replacement in reversed(cuts):
            data = data[:start] + replacement.encode("utf-8") + data[end:]
        return data.decode("utf-8")

    def lines(self, text: str) -> tuple[str, str]:
        """The whole mutated line(s) before and after, stripped (what a statement must hide)."""
        spans = self.spans()
        first = min(s[0] for s in spans)
        last = max(s[2] for s in spans)
        before = text.splitlines()[first - 1:last]
        delta = sum(s[5].count("\n") - s[4].count("\n") for s in spans)
        after = self.apply(text).splitlines()[first - 1:last + delta]
        return "\n".join(s.strip() for s in before), "\n".join(s.strip() for s in after)

    @property
    def lines_changed(self) -> int:
        """Source lines the change touches (each span's original lines, summed; a span that
        ends at column 0 of a line, a deletion of whole lines, does not touch that line)."""
        return sum(s[2] - s[0] + (s[3] > 0 or s[2] == s[0]) for s in self.spans())


def _line_starts(data: bytes, upto: int | None = None) -> list[int]:
    """The offset each line of `data` starts at (lines end at b"\\n", as ast counts them),
    of its first `upto` lines only when given (a mutation near the top of a long file)."""
    pieces = data.split(b"\n") if upto is None else data.split(b"\n", max(upto - 1, 0))
    return [0, *itertools.accumulate(len(piece) + 1 for piece in pieces[:-1])]
