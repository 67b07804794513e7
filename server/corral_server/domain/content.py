"""Prompt content: what a user sends to an agent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str


@dataclass(frozen=True, slots=True)
class ImagePart:
    mime_type: str
    data: bytes


ContentPart: TypeAlias = TextPart | ImagePart
Prompt: TypeAlias = tuple[ContentPart, ...]


def prompt_text(prompt: Prompt) -> str:
    """The text parts of a prompt joined by newlines (images are left out)."""
    return "\n".join(part.text for part in prompt if isinstance(part, TextPart))


def prompt_chars(prompt: Prompt) -> int:
    """Size of a prompt for limits: characters of text plus bytes of images."""
    total = 0
    for part in prompt:
        total += len(part.text) if isinstance(part, TextPart) else len(part.data)
    return total
