"""Lets PyPI's torchvision import beside a CPU-only torch.

PyPI's Linux torchvision wheels are CUDA builds. Beside a ``+cpu`` torch their compiled extension
(``torchvision/_C.so``) cannot load, and ``import torchvision`` then dies in
``torchvision/_meta_registrations.py``, which registers fake kernels for ``torchvision::nms`` and
``torchvision::qnms`` without checking that those operators exist. Transformers' video processors need
torchvision's Python transforms, which work fine without the extension.

The fix: just before torchvision is first imported, try to load its extension; only if that fails,
declare the two operator schemas so the registration succeeds. The compiled ops themselves (nms,
roi_align, image decoding) stay unavailable, which nothing in ReelRL uses. On GPU installs the
extension loads and this module changes nothing.

``install()`` is called from a ``.pth`` file that ``scripts/bootstrap.sh`` writes into the virtual
environment, so it also takes effect in processes that never import ReelRL (vLLM's workers). It only
adds an import hook; torch is not imported until something imports torchvision.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
)
_library = None  # keeps the fragment alive: dropping it would unregister the schemas
_applied = False


def extension_loads() -> bool:
    """Whether torchvision's compiled extension can be loaded into this torch."""
    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return True
    for location in spec.submodule_search_locations:
        for so in Path(location).glob("_C*.so"):
            try:
                torch.ops.load_library(str(so))
                return True
            except (OSError, RuntimeError):
                return False
    return True


def apply() -> bool:
    """Declare the missing schemas if needed; returns whether it had to."""
    global _library, _applied
    if _applied:
        return _library is not None
    _applied = True
    if extension_loads():
        return False
    import torch

    _library = torch.library.Library("torchvision", "DEF")
    for schema in _SCHEMAS:
        _library.define(schema)
    return True


class _BeforeTorchvision(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torchvision":
            sys.meta_path.remove(self)
            apply()
        return None  # the regular finders import torchvision itself


def install() -> None:
    """Arm the fix for the first ``import torchvision`` of this process."""
    if "torchvision" in sys.modules:
        apply()
    elif not any(isinstance(f, _BeforeTorchvision) for f in sys.meta_path):
        sys.meta_path.insert(0, _BeforeTorchvision())
