"""The open elements of an HTML parse, with where each tag name is open: lookups in O(1), not O(depth).

Closing the elements real-world HTML leaves open means asking, for every start and end tag, "which
is the nearest open <p> (or li, or td), unless a table, list or cell lies above it?". Walking the
stack to answer made 200,000 nested <div>s, <section>s or <ul>s, or as many stray end tags, a
quadratic parse (minutes; issue 18). Here each tag name keeps the stack positions where it is
open, so the answer is the comparison of two positions whatever the depth.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Generic, TypeVar

T = TypeVar("T")


class OpenStack(Generic[T]):
    def __init__(self) -> None:
        self.items: list[T] = []
        self._tags: list[str] = []
        self._at: dict[str, list[int]] = {}

    def __len__(self) -> int:
        return len(self.items)

    def __bool__(self) -> bool:
        return bool(self.items)

    def push(self, tag: str, item: T) -> None:
        self._at.setdefault(tag, []).append(len(self.items))
        self._tags.append(tag)
        self.items.append(item)

    def pop(self) -> T:
        tag = self._tags.pop()
        at = self._at[tag]
        at.pop()
        if not at:
            del self._at[tag]  # only open names are kept, so `nearest` looks at a handful of them
        return self.items.pop()

    def top(self) -> T:
        return self.items[-1]

    def nearest(self, tags: Collection[str]) -> int:
        """Index of the innermost open element with one of these names; -1 when none is open."""
        best = -1
        names = tags if len(tags) <= len(self._at) else [t for t in self._at if t in tags]
        for tag in names:
            at = self._at.get(tag)
            if at and at[-1] > best:
                best = at[-1]
        return best

    def in_scope(self, tags: Collection[str], scope: Collection[str]) -> int:
        """Index of the innermost open element named `tags` with no `scope` element inside it; -1 if none."""
        found = self.nearest(tags)
        return found if found > self.nearest(scope) else -1
