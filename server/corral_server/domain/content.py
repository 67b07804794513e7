"""Prompt content: what a user sends to an agent."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeAlias

# A prompt's preview: the first characters of its text, what a summary of it shows (256
# characters are a few lines: enough to recognise a prompt in a list).
PREVIEW_CHARS = 256


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


@dataclass(frozen=True, slots=True)
class PromptSummary:
    """What a listing shows of a prompt instead of the prompt: its size and its beginning."""

    text_bytes: int  # UTF-8 bytes of its text (text parts joined by newlines)
    chars: int  # as `prompt_chars` counts: characters of text plus bytes of images
    image_count: int
    preview: str  # the first PREVIEW_CHARS characters of its text
    # True when the preview is not the whole prompt (longer text, several parts, an image).
    clipped: bool

    @staticmethod
    def of(prompt: Prompt) -> PromptSummary:
        text = prompt_text(prompt)
        images = sum(1 for part in prompt if isinstance(part, ImagePart))
        whole = len(prompt) == 1 and not images and len(text) <= PREVIEW_CHARS
        return PromptSummary(
            text_bytes=len(text.encode("utf-8", "surrogatepass")),
            chars=prompt_chars(prompt),
            image_count=images,
            preview=text[:PREVIEW_CHARS],
            clipped=not whole,
        )
