"""Frame folders: a directory of numbered images (``00001.jpg`` …) read as a video at a declared rate.

Some benchmarks ship frames instead of files (MVBench's episodic_reasoning: TVQA frames extracted at
3 fps). A folder is a video source like a file: its content hash covers every frame file (name, size
and bytes, in frame order), frames are sampled with the same rule and resized the same way. Only the
frame rate cannot be read from it; the clip parameters declare it (``VideoParams.folder_fps``).

Frame order is the number in each file name (the last run of digits of the stem, so ``frame_9.jpg``
comes before ``frame_10.jpg``); frame ``i`` of the clip is the ``i``-th image in that order, at
``i / folder_fps`` seconds (gaps in the numbering do not add time). Files that are not images
(``.jpg``, ``.jpeg``, ``.png``, ``.bmp``, ``.webp``) and hidden files are not frames.

With data roots configured (``REELRL_DATA_ROOTS``), every frame must resolve inside them: a folder
inside the roots whose frames are symlinks to files elsewhere is refused, as such a file would be.
"""

from __future__ import annotations

import re
from pathlib import Path

import blake3
import numpy as np

from services.common.frames.decoders import DecodeError, StreamInfo
from services.common.frames.timing import SourceTiming
from services.common.settings import get_settings

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp"})
_NUMBER = re.compile(r"(\d+)\D*$")
_CHUNK = 1 << 20


def frame_files(folder: Path) -> list[Path]:
    """The frame images of ``folder`` in frame order; DecodeError if a name carries no number, two
    names carry the same one, there are no images, or (data roots configured) a frame resolves
    outside the data roots."""
    roots = [root.resolve() for root in get_settings().data_roots]
    numbered: dict[int, Path] = {}
    for path in folder.iterdir():
        if path.name.startswith(".") or path.suffix.lower() not in IMAGE_SUFFIXES or not path.is_file():
            continue
        if roots:
            # the folder was checked against the roots; a symlinked frame could still read any file
            target = path.resolve()
            if not any(target.is_relative_to(root) for root in roots):
                raise DecodeError(
                    f"{folder}: frame file {path.name!r} resolves to {target}, outside the data roots "
                    f"{[str(r) for r in roots]}"
                )
        match = _NUMBER.search(path.stem)
        if match is None:
            raise DecodeError(f"{folder}: frame file {path.name!r} has no frame number in its name")
        number = int(match.group(1))
        if number in numbered:
            raise DecodeError(
                f"{folder}: {numbered[number].name!r} and {path.name!r} both claim frame number {number}"
            )
        numbered[number] = path
    if not numbered:
        raise DecodeError(
            f"{folder}: a frame folder must hold images ({', '.join(sorted(IMAGE_SUFFIXES))}); none found"
        )
    return [numbered[n] for n in sorted(numbered)]


def folder_hash(folder: Path) -> str:
    """``blake3-frames:<hex>`` over every frame file's name, size and bytes, in frame order.

    Names are part of the content because they decide the order; the prefix keeps a folder's hash
    apart from any file's.
    """
    hasher = blake3.blake3()
    for path in frame_files(folder):
        hasher.update(f"{path.name}\0{path.stat().st_size}\0".encode())
        with open(path, "rb") as fh:
            while chunk := fh.read(_CHUNK):
                hasher.update(chunk)
    return f"blake3-frames:{hasher.hexdigest()}"


def folder_size(folder: Path) -> int:
    """Bytes of the frame files of ``folder``."""
    return sum(p.stat().st_size for p in frame_files(folder))


class FrameFolder:
    """An open frame folder with the decoders' interface (``info``, ``read(indices)``, ``close()``)."""

    def __init__(self, folder: Path, fps: float | None) -> None:
        if fps is None:
            raise DecodeError(
                f"{folder}: a frame folder has no frame rate of its own; set folder_fps in the clip "
                "parameters (the rate its frames were extracted at)"
            )
        self._folder = folder
        self._files = frame_files(folder)
        if len(self._files) < 2:
            raise DecodeError(f"{folder}: holds {len(self._files)} frame image; a video needs at least two")
        first = self._image(0)
        height, width = first.shape[:2]
        self.info = StreamInfo(SourceTiming(len(self._files), float(fps)), height, width, "images")

    def _image(self, index: int) -> np.ndarray:
        from PIL import Image, UnidentifiedImageError

        from services.common.frames.images import rgb8

        path = self._files[index]
        try:
            with Image.open(path) as img:
                return np.asarray(rgb8(img))
        except (OSError, UnidentifiedImageError) as exc:
            raise DecodeError(f"{self._folder}: cannot read frame image {path.name!r}: {exc}") from exc

    def read(self, indices: list[int]) -> np.ndarray:
        out = []
        height, width = self.info.height, self.info.width
        for index in indices:
            image = self._image(index)
            if image.shape[:2] != (height, width):
                raise DecodeError(
                    f"{self._folder}: frame image {self._files[index].name!r} is "
                    f"{image.shape[1]}x{image.shape[0]}, the first frame {width}x{height}; "
                    "every frame of a video must have one size"
                )
            out.append(image)
        return np.stack(out)

    def close(self) -> None:
        pass
