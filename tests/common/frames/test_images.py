"""16-bit images reach the model scaled to 8 bits, not clipped to white, on every image path."""

import numpy as np
import pytest
from PIL import Image

from services.common.frames import VideoParams, decode_clip
from services.common.frames.images import rgb8, to_8bit
from services.rollout.sources import read_image

# A horizontal ramp over the whole 16-bit range: 0, 257·k, …, 65535 (k = 0 … 255) and odd values between.
RAMP = np.array([0, 255, 256, 257, 32767, 32768, 65279, 65280, 65535], dtype=np.uint16)


def test_top_byte_by_hand():
    # v >> 8: 255 → 0, 256 → 1, 257 → 1, 32767 → 127, 32768 → 128, 65279 → 254, 65280 → 255, 65535 → 255
    assert to_8bit(RAMP).tolist() == [0, 0, 1, 1, 127, 128, 254, 255, 255]
    assert to_8bit(np.array([-5, 70000], dtype=np.int32)).tolist() == [0, 255]  # mode "I" out of range


def _gray16(path, values: np.ndarray, repeat: int = 28):
    """A real 16-bit grayscale PNG (Pillow writes it; it opens as mode I;16)."""
    Image.fromarray(np.repeat(np.repeat(values[None, :], repeat, 0), repeat, 1)).save(path)
    with Image.open(path) as image:
        assert image.mode == "I;16"
    return path


def _wide(mode: str) -> Image.Image:
    if mode == "I;16B":  # big-endian samples, as a TIFF or a raw camera dump holds them
        return Image.frombytes(mode, (len(RAMP), 1), RAMP.astype(">u2").tobytes())
    image = Image.fromarray(RAMP[None, :])  # I;16
    return image if mode == "I;16" else image.convert(mode)


@pytest.mark.parametrize("mode", ["I;16", "I;16B", "I"])
def test_wide_gray_modes_scale(mode):
    image = _wide(mode)
    assert image.mode == mode
    out = np.asarray(rgb8(image))
    assert out.shape == (1, len(RAMP), 3) and out.dtype == np.uint8
    assert out[0, :, 0].tolist() == [0, 0, 1, 1, 127, 128, 254, 255, 255]
    assert (out[..., 0] == out[..., 1]).all() and (out[..., 1] == out[..., 2]).all()


def test_an_image_sample_from_a_16_bit_png_is_scaled(tmp_path):
    values = np.array([0, 16384, 32768, 49152], dtype=np.uint16)  # black, dark, mid, light grey
    path = _gray16(tmp_path / "depth.png", values)
    pixels, meta = read_image(path, factor=28, min_pixels=28 * 28, max_pixels=112 * 28)
    assert (meta["width"], meta["height"]) == (112, 28)  # no resize: exact columns survive
    assert pixels[0, ::28, 0].tolist() == [0, 64, 128, 192]  # not [0, 255, 255, 255]


def test_a_frame_folder_of_16_bit_pngs_is_scaled(tmp_path):
    folder = tmp_path / "frames"
    folder.mkdir()
    for i in (1, 2):
        _gray16(folder / f"{i:05d}.png", np.full(4, 32768 * (i - 1) + 16384, dtype=np.uint16))
    frames, _ = decode_clip(folder, VideoParams(folder_fps=2.0))
    means = frames.float().mean(dim=(1, 2, 3)).tolist()
    assert means == pytest.approx([64, 192], abs=1)  # 16384 >> 8, 49152 >> 8; clipped both are 255


def test_48_bit_rgb_pngs_get_the_same_top_byte(tmp_path):
    # Pillow has no 16-bit RGB mode: it opens a 48-bit PNG as 8-bit RGB by the top byte itself, the
    # rule rgb8 applies to 16-bit gray, so both depths of one picture give the same bytes.
    import av

    values = np.stack([RAMP, RAMP[::-1], np.full_like(RAMP, 40000)], axis=-1)[None].repeat(2, 0)
    path = tmp_path / "rgb48.png"
    with av.open(str(path), "w", format="image2") as container:
        stream = container.add_stream("png")
        stream.width, stream.height, stream.pix_fmt = values.shape[1], values.shape[0], "rgb48be"
        container.mux(stream.encode(av.VideoFrame.from_ndarray(values, format="rgb48le")))
        container.mux(stream.encode())
    with Image.open(path) as image:
        out = np.asarray(rgb8(image))
    assert (out == to_8bit(values)).all()
