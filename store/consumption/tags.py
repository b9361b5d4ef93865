"""Tag expressions of a receive: "*" (or empty) takes every message, "TagA || TagB" those tags."""

from __future__ import annotations

from dataclasses import dataclass

TAG_EXPRESSION_LENGTH_MAX = 1_024
TAGS_PER_EXPRESSION_MAX = 64


class TagExpressionError(ValueError):
    """An expression that cannot be parsed: an empty alternative, too long, too many tags."""


@dataclass(frozen=True, slots=True)
class TagFilter:
    tags: frozenset[str] | None  # None: every message, with or without a tag

    @classmethod
    def parse(cls, expression: str | None) -> TagFilter:
        text = (expression or "").strip()
        if len(text) > TAG_EXPRESSION_LENGTH_MAX:
            raise TagExpressionError(
                f"a tag expression holds at most {TAG_EXPRESSION_LENGTH_MAX} characters")
        if text in ("", "*"):
            return cls(None)
        parts = [part.strip() for part in text.split("||")]
        if any(part == "" or part == "*" for part in parts):
            raise TagExpressionError(f"bad tag expression {text!r}: expected 'TagA || TagB' or '*'")
        if len(parts) > TAGS_PER_EXPRESSION_MAX:
            raise TagExpressionError(
                f"a tag expression names at most {TAGS_PER_EXPRESSION_MAX} tags")
        return cls(frozenset(parts))

    def matches(self, tag: str | None) -> bool:
        return self.tags is None or (tag is not None and tag in self.tags)
