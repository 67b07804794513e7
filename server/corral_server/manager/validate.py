"""Input rules for agent fields and prompts, checked before anything changes."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from corral_server.domain.content import ImagePart, Prompt, TextPart, prompt_chars
from corral_server.errors import FieldViolation, InvalidArgument


@dataclass(frozen=True, slots=True)
class Limits:
    """Configured limits; each breach is INVALID_ARGUMENT naming the limit."""

    max_prompt_chars: int = 1_000_000
    max_title_chars: int = 1_000
    max_labels: int = 64
    max_label_chars: int = 256
    max_id_chars: int = 256


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
    if len(value) > limits.max_id_chars:
        raise InvalidArgument.field(field, f"at most {limits.max_id_chars} chars")
