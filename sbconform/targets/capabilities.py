"""Capabilities a target declares from what it measures, decided when first asked about.

Most capabilities are known when a target is made (``Target.capabilities``: a frozenset). Some are
known only once the broker was measured: the SDK target can compare the broker's clock with its own
(``broker-clock``) only if it measured the broker's offset closely enough. The pytest plugin asks
the target it makes at configuration and never opens (its probe), before each test, whether it has
the capabilities the test needs; it reads the attribute at configuration too, before its preflight
and in collection-only runs, when reaching the broker would be wrong. ``Capabilities`` is a set
whose measured members are decided on the first question about them (``in``, iteration, ``len``),
never by reading the attribute; set arithmetic on it (``|``, ``-``) keeps them undecided."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from typing import Any, Callable, Iterable, Iterator, Mapping


def declared_names(capabilities: Iterable[str]) -> frozenset[str]:
    """The names in ``capabilities``: a ``Capabilities``' declared ones (its measured ones undecided)."""
    return capabilities.declared if isinstance(capabilities, Capabilities) else frozenset(capabilities)


class Capabilities(AbstractSet):
    """``declared`` capabilities, and ``measured`` ones: name -> a function saying whether the target has it."""

    __hash__ = None  # type: ignore[assignment]  # decided members may change: a set, not a key

    def __init__(self, declared: Iterable[str], measured: Mapping[str, Callable[[], bool]] | None = None) -> None:
        self.declared = frozenset(declared)
        self.measured = {k: v for k, v in (measured or {}).items() if k not in self.declared}

    def __contains__(self, capability: object) -> bool:
        if capability in self.declared:
            return True
        decide = self.measured.get(capability)  # type: ignore[call-overload]
        return bool(decide is not None and decide())

    def _decided(self) -> frozenset[str]:
        return self.declared | {name for name, decide in self.measured.items() if decide()}

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._decided()))

    def __len__(self) -> int:
        return len(self._decided())

    def __or__(self, other: Any) -> "Capabilities":
        return Capabilities(self.declared | declared_names(other), self.measured)

    def __sub__(self, other: Any) -> "Capabilities":
        fewer = declared_names(other)
        return Capabilities(self.declared - fewer, {k: v for k, v in self.measured.items() if k not in fewer})

    def __repr__(self) -> str:
        return f"Capabilities({sorted(self.declared)}, measured={sorted(self.measured)})"
