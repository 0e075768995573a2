"""One module per family of problem types; importing this package registers every type."""

from services.reward.types import (  # noqa: F401 - imported for their @register side effect
    boolean,
    choice,
    code,
    grounding,
    mathexpr,
    numeric,
    preference,
    segmentation,
    text,
)
