"""Mini-batch splitting gives every rank the same number of optimizer steps."""

from services.trainer.update import split


def test_split_into_exactly_the_parts_asked() -> None:
    assert split(range(5), 4) == [[0, 1], [2], [3], [4]]  # ceil-sized chunks would give 3 parts
    assert split(range(4), 4) == [[0], [1], [2], [3]]
    assert split(range(9), 2) == [[0, 1, 2, 3, 4], [5, 6, 7, 8]]
    assert split(range(2), 4) == [[0], [1]]  # fewer items than parts: update_policy refuses this case
