"""`onnxsat show` and `show-egraph`: real PNG and SVG files, with the labels, highlights and refusals."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import onnx
import pytest

from onnxsat.cli import main
from onnxsat.show.graph import FUSED_COLOUR
from onnxsat.zoo.synthetic import demo_cnn

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SVG = "{http://www.w3.org/2000/svg}"


def svg_texts(path: Path) -> list[str]:
    """Every text Graphviz drew (the file must parse as XML)."""
    return [t.text or "" for t in ET.parse(path).getroot().iter(f"{SVG}text")]


def fused_labels(path: Path) -> list[str]:
    """The first text line of every graph node (not the legend's) drawn in the fused colour."""
    found = []
    for group in ET.parse(path).getroot().iter(f"{SVG}g"):
        title = group.find(f"{SVG}title")
        if group.get("class") != "node" or title is None or (title.text or "").startswith("legend"):
            continue
        shapes = [s for s in group.iter() if s.tag in (f"{SVG}path", f"{SVG}polygon")]
        texts = [t.text or "" for t in group.iter(f"{SVG}text")]
        if any(s.get("fill") == FUSED_COLOUR for s in shapes) and texts:
            found.append(texts[0])
    return found


def test_show_writes_a_png(cnn_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    picture = tmp_path / "graph.png"
    assert main(["show", str(cnn_file), "-o", str(picture)]) == 0
    assert picture.read_bytes().startswith(PNG_MAGIC)
    assert "19 nodes" in capsys.readouterr().out


def test_show_svg_has_ops_names_and_folded_weights(cnn_file: Path, tmp_path: Path) -> None:
    picture = tmp_path / "graph.svg"
    assert main(["show", str(cnn_file), "-o", str(picture)]) == 0
    texts = svg_texts(picture)
    assert "Conv" in texts and "BatchNormalization" in texts and "stem_conv_node" in texts
    assert "stem_w: 16×3×3×3" in texts  # the initializer is inside its node's box, not a node of its own
    assert not any(text.startswith("stem_w") and ":" not in text for text in texts)
    assert "stem_conv" in texts  # an edge labelled with its tensor


def test_compare_highlights_fused_conv(optimized_pair: tuple[Path, Path, Path], tmp_path: Path) -> None:
    original, result, _ = optimized_pair
    picture = tmp_path / "compare.svg"
    assert main(["show", str(original), "--compare", str(result), "-o", str(picture)]) == 0
    fused = fused_labels(picture)
    assert fused.count("com.microsoft::FusedConv + Relu") == 3
    assert "com.microsoft::FusedGemm + Relu" in fused
    assert not any(label.startswith("BatchNormalization") for label in fused)
    texts = svg_texts(picture)
    assert "legend" in texts and "cnn.onnx (19 nodes)" in texts and "cnn_opt.onnx (10 nodes)" in texts


def test_compare_highlights_the_fusions_a_report_lists(cnn_file: Path, tmp_path: Path) -> None:
    """The portable target fuses BN into Conv without a com.microsoft op: only the report tells."""
    result, report, picture = tmp_path / "portable.onnx", tmp_path / "report.json", tmp_path / "compare.svg"
    assert main(["optimize", str(cnn_file), "-o", str(result), "--target", "portable", "--report", str(report)]) == 0
    fusions = json.loads(report.read_text())["fusions"]
    assert fusions.get("Conv+BatchNormalization -> Conv") == 4
    assert main(["show", str(cnn_file), "--compare", str(result), "-o", str(picture)]) == 0
    assert fused_labels(picture) == []
    assert main(["show", str(cnn_file), "--compare", str(result), "--report", str(report), "-o", str(picture)]) == 0
    assert fused_labels(picture).count("Conv") == 4


def test_show_refusals(cnn_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(cnn_file), "-o", str(tmp_path / "graph.pdf")]) == 9
    assert "-o must end in .png or .svg" in capsys.readouterr().err
    assert main(["show", str(cnn_file), "-o", str(tmp_path / "g.svg"), "--max-nodes", "5"]) == 9
    assert "has 19 nodes" in capsys.readouterr().err
    assert main(["show", str(cnn_file), "-o", str(tmp_path / "g.svg"), "--report", str(cnn_file)]) == 9
    assert "give --compare too" in capsys.readouterr().err
    assert not (tmp_path / "g.svg").exists()


def test_show_never_writes_over_the_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "model.svg"  # a model file whose name ends in .svg: still the input
    onnx.save(demo_cnn(), str(model))
    before = model.read_bytes()
    assert main(["show", str(model), "-o", str(model)]) == 7
    assert "is the input model itself" in capsys.readouterr().err
    assert model.read_bytes() == before


def test_missing_dot_says_what_to_install(
    cnn_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("onnxsat.show.render.shutil.which", lambda name: None)
    assert main(["show", str(cnn_file), "-o", str(tmp_path / "graph.png")]) == 13
    assert "apt-get install graphviz" in capsys.readouterr().err
    assert not (tmp_path / "graph.png").exists()


def test_show_egraph_of_a_three_node_model(
    small_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    picture = tmp_path / "egraph.svg"
    assert main(["show-egraph", str(small_file), "-o", str(picture)]) == 0
    assert "saturation ran" in capsys.readouterr().out
    root = ET.parse(picture).getroot()
    clusters = [g for g in root.iter(f"{SVG}g") if g.get("class") == "cluster"]
    texts = svg_texts(picture)
    # the output tensor's e-class holds both forms: Relu(BN(Conv)) and the fused node the rules added
    assert "tensor b0_relu (graph output)" in texts
    assert "Node Relu" in texts and "Node FusedConv (com.microsoft)" in texts
    assert 'Tensor.initializer("b0_w")' in texts
    assert len(clusters) >= 10
    assert not any("HasShape" in text or "OpKind" in text for text in texts)  # analysis relations left out


def test_show_egraph_png_and_raw(small_file: Path, tmp_path: Path) -> None:
    assert main(["show-egraph", str(small_file), "-o", str(tmp_path / "egraph.png")]) == 0
    assert (tmp_path / "egraph.png").read_bytes().startswith(PNG_MAGIC)
    raw = tmp_path / "raw.svg"
    assert main(["show-egraph", str(small_file), "-o", str(raw), "--raw"]) == 0
    assert any("HasShape" in text for text in svg_texts(raw))  # egglog's drawing has every table


def test_show_egraph_refuses_a_large_model(cnn_file: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show-egraph", str(cnn_file), "-o", str(tmp_path / "egraph.svg")]) == 9
    assert "has 19 nodes; show-egraph draws models of at most 8 nodes" in capsys.readouterr().err
    assert not (tmp_path / "egraph.svg").exists()
