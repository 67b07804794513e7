"""Label selectors for ListAgents: comma-separated terms that must all hold.

key=value    the label is set to value
key!=value   the label is unset or set to something else
key          the label is set
!key         the label is unset
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from corral_server.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class Term:
    key: str
    value: str | None  # None: presence only
    negated: bool

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.value is None:
            return (self.key in labels) != self.negated
        return (labels.get(self.key) == self.value) != self.negated


@dataclass(frozen=True, slots=True)
class Selector:
    terms: tuple[Term, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(term.matches(labels) for term in self.terms)


def parse_selector(text: str) -> Selector:
    terms = []
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            if text.strip():
                raise InvalidArgument.field("label_selector", f"empty term in {text!r}")
            continue
        terms.append(_parse_term(part, text))
    return Selector(tuple(terms))


def _parse_term(part: str, text: str) -> Term:
    if "!=" in part:
        key, value = part.split("!=", 1)
        term = Term(key.strip(), value.strip(), negated=True)
    elif "=" in part:
        key, value = part.split("=", 1)
        term = Term(key.strip(), value.strip(), negated=False)
    elif part.startswith("!"):
        term = Term(part[1:].strip(), None, negated=True)
    else:
        term = Term(part, None, negated=False)
    if not term.key or any(c in term.key for c in "=!"):
        raise InvalidArgument.field(
            "label_selector",
            f"bad term {part!r} in {text!r}: expected key=value, key!=value, key or !key",
        )
    return term
