"""What every configuration model shares: strict validation, and errors that name the field."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError


class StrictModel(BaseModel):
    """Base for every scenario model: unknown keys are errors, values are validated."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


def format_validation_error(error: ValidationError) -> str:
    """'field.path: message' for each problem, joined on one line."""
    parts = []
    for item in error.errors():
        loc = ".".join(str(p) for p in item["loc"]) or "(top level)"
        message = item["msg"]
        # pydantic prefixes messages raised in validators; the field path already says where.
        message = message.removeprefix("Value error, ")
        parts.append(f"{loc}: {message}")
    return "; ".join(parts)
