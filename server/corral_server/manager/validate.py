"""Input rules for agent fields and prompts, checked before anything changes."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from corral_server.domain.content import ImagePart, Prompt, TextPart, prompt_chars
from corral_server.domain.timeline import MAX_ROW_BYTES
from corral_server.errors import FieldViolation, InvalidArgument
from corral_server.timeline.size import text_bytes

# A prompt's text is stored as one user row, next to two ids of at most max_id_chars (256
# characters: 1 KiB of UTF-8 each) and a few bytes of framing: 8 KiB is room for them all.
MAX_PROMPT_BYTES = MAX_ROW_BYTES - 8 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """Configured limits; each breach is INVALID_ARGUMENT naming the limit."""

    max_prompt_chars: int = 1_000_000
    # UTF-8 bytes of a prompt's text (its text parts joined by newlines): one user row.
    max_prompt_bytes: int = MAX_PROMPT_BYTES
    # Content parts of one prompt (text and images): checked on the request before any work.
    max_content_parts: int = 1_000
    max_title_chars: int = 1_000
    max_labels: int = 64
    max_label_chars: int = 256
    max_id_chars: int = 256
    # Ids named in one request (ClearAttention's agent_ids, Subscribe's agent_ids).
    max_ids: int = 1_000

    def __post_init__(self) -> None:
        if not 0 < self.max_prompt_bytes <= MAX_PROMPT_BYTES:
            raise ValueError(
                f"max_prompt_bytes must be 1..{MAX_PROMPT_BYTES} (a prompt is one row of at "
                f"most MAX_ROW_BYTES), got {self.max_prompt_bytes}"
            )
        if self.max_id_chars > 1_024:
            raise ValueError("max_id_chars above 1024 would leave ids no room in a prompt row")


def check_prompt(prompt: Prompt, limits: Limits, field: str = "content") -> None:
    if not prompt:
        raise InvalidArgument.field(field, "a prompt needs at least one text or image part")
    if all(isinstance(p, TextPart) and not p.text.strip() for p in prompt):
        where = f"{field}[0].text" if len(prompt) == 1 else field
        raise InvalidArgument.field(where, "the prompt is empty")
    for i, part in enumerate(prompt):
        if isinstance(part, ImagePart) and not part.mime_type.startswith("image/"):
            raise InvalidArgument.field(f"{field}[{i}].image.mime_type", "must be image/*")
    size = prompt_chars(prompt)
    if size > limits.max_prompt_chars:
        raise InvalidArgument.field(
            field, f"the prompt is {size} chars; the limit is {limits.max_prompt_chars}"
        )
    size = prompt_text_bytes(prompt)
    if size > limits.max_prompt_bytes:
        raise InvalidArgument.field(
            field,
            f"the prompt's text is {size} bytes of UTF-8; the limit is {limits.max_prompt_bytes}"
            " (max_prompt_bytes)",
        )


def prompt_text_bytes(prompt: Prompt) -> int:
    """UTF-8 bytes of the prompt's text as stored: its text parts joined by newlines."""
    texts = [part.text for part in prompt if isinstance(part, TextPart)]
    return sum(map(text_bytes, texts)) + max(0, len(texts) - 1)


def check_cwd(cwd: str) -> None:
    if not cwd:
        raise InvalidArgument.field("cwd", "required: the agent's working directory")
    if not os.path.isabs(cwd):
        raise InvalidArgument.field("cwd", f"must be an absolute path, got {cwd!r}")
    if not os.path.isdir(cwd):
        raise InvalidArgument.field("cwd", f"no such directory: {cwd!r}")


def check_title(title: str, limits: Limits) -> None:
    if len(title) > limits.max_title_chars:
        raise InvalidArgument.field(
            "title", f"{len(title)} chars; the limit is {limits.max_title_chars}"
        )


def check_labels(labels: Mapping[str, str], limits: Limits) -> None:
    violations = []
    if len(labels) > limits.max_labels:
        violations.append(
            FieldViolation("labels", f"{len(labels)} labels; the limit is {limits.max_labels}")
        )
    for key, value in labels.items():
        if not key or any(c in key for c in "=!, ") or len(key) > limits.max_label_chars:
            violations.append(
                FieldViolation(
                    f"labels[{key!r}]", "keys are 1-256 chars without '=', '!', ',' or spaces"
                )
            )
        if "," in value or len(value) > limits.max_label_chars:
            violations.append(
                FieldViolation(f"labels[{key!r}]", "values are at most 256 chars without ','")
            )
    if violations:
        raise InvalidArgument("invalid labels", *violations)


def check_id(field: str, value: str, limits: Limits) -> None:
    if not value:
        raise InvalidArgument.field(field, "required")
    check_optional_id(field, value, limits)


def check_optional_id(field: str, value: str, limits: Limits) -> None:
    """An id the caller may leave empty (a prompt's client_message_id)."""
    if len(value) > limits.max_id_chars:
        raise InvalidArgument.field(field, f"at most {limits.max_id_chars} chars")
