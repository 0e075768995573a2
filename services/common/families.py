"""Model families and the vision geometry that decides how their frames are sampled and resized."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class FamilyName(enum.StrEnum):
    qwen2_vl = "qwen2_vl"
    qwen2_5_vl = "qwen2_5_vl"
    qwen3_vl = "qwen3_vl"
    qwen3_5 = "qwen3_5"


@dataclass(frozen=True)
class Family:
    name: FamilyName
    patch_size: int
    merge_size: int
    temporal_patch_size: int
    # transformers ``model_type`` of the full checkpoint
    model_type: str

    @property
    def factor(self) -> int:
        """Resized frame sides are multiples of this (one merged patch)."""
        return self.patch_size * self.merge_size


FAMILIES: dict[FamilyName, Family] = {
    f.name: f
    for f in (
        Family(FamilyName.qwen2_vl, 14, 2, 2, "qwen2_vl"),
        Family(FamilyName.qwen2_5_vl, 14, 2, 2, "qwen2_5_vl"),
        Family(FamilyName.qwen3_vl, 16, 2, 2, "qwen3_vl"),
        Family(FamilyName.qwen3_5, 16, 2, 2, "qwen3_5"),
    )
}


def get_family(name: str | FamilyName) -> Family:
    try:
        return FAMILIES[FamilyName(name)]
    except ValueError:
        known = ", ".join(f.value for f in FamilyName)
        raise ValueError(f"unknown model family {name!r}; known families: {known}") from None
