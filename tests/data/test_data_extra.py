"""The ``data`` extra: scikit-learn and Pillow are imported only by the sources that need them.

Without them ``onnxsat.data.sources`` still imports, ``.npz`` files and CIFAR-10 batches at their own size
still load, and the digits or an image folder stop with one line naming the extra to install.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from onnxsat.data.sources import DIGITS_SPLIT, load_dataset
from onnxsat.errors import MissingExtraError


@pytest.fixture
def no_data_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make scikit-learn and Pillow look uninstalled (a None entry in sys.modules makes the import fail)."""
    for name in ("sklearn", "sklearn.datasets", "PIL", "PIL.Image"):
        monkeypatch.setitem(sys.modules, name, None)


def test_importing_the_sources_loads_neither_scikit_learn_nor_pillow() -> None:
    imports = "import sys, onnxsat.data.sources, onnxsat.zoo.digits_cnn"
    code = f"{imports}; print(sorted({{'sklearn', 'PIL'}} & sys.modules.keys()))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_npz_and_cifar_load_without_the_extra(no_data_extra: None, tmp_path: Path) -> None:
    np.savez(tmp_path / "d.npz", inputs=np.ones((3, 2), np.float32), labels=np.array([0, 1, 2]))
    assert len(load_dataset(str(tmp_path / "d.npz"), [None, 2])) == 3
    batch = {b"data": np.zeros((2, 3 * 32 * 32), np.uint8), b"labels": [1, 2]}
    (tmp_path / "test_batch").write_bytes(pickle.dumps(batch))
    assert load_dataset(str(tmp_path / "test_batch"), [1, 3, 32, 32]).inputs.shape == (2, 3, 32, 32)


@pytest.mark.parametrize(
    ("spec", "shape", "message"),
    [
        ("digits", [None, 1, 8, 8], "scikit-learn's digits: scikit-learn is not installed"),
        ("digits-test", [None, 1, 8, 8], "scikit-learn's digits: scikit-learn is not installed"),
        ("folder", [1, 3, 8, 8], "image folders: pillow is not installed"),
        ("test_batch", [1, 3, 16, 16], "resizing images to the model's input: pillow is not installed"),
    ],
)
def test_a_source_needing_the_extra_names_it(
    no_data_extra: None, tmp_path: Path, spec: str, shape: list[int | None], message: str
) -> None:
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "a.png").write_bytes(b"\x89PNG not read")
    batch = {b"data": np.zeros((2, 3 * 32 * 32), np.uint8), b"labels": [1, 2]}
    (tmp_path / "test_batch").write_bytes(pickle.dumps(batch))
    path = spec if spec.startswith("digits") else str(tmp_path / spec)
    with pytest.raises(MissingExtraError) as error:
        load_dataset(path, shape)
    assert str(error.value) == f"{message}; pip install 'onnxsat[data]'"


def test_the_digits_split_lives_in_data() -> None:
    from onnxsat.zoo import digits_cnn

    assert digits_cnn.DIGITS_SPLIT is DIGITS_SPLIT
    train, test = DIGITS_SPLIT.indices(1797)
    assert len(train) == 1400 and len(test) == 397
