"""enhanced.load_checkpoint / save_checkpoint against the engine's own checkpoints."""
import json
import os
import stat

import numpy as np
import pytest

import enhanced
from conftest import run_app


def test_engine_checkpoint_loads_with_its_config(trained_checkpoint):
    config, tensors = enhanced.load_checkpoint(trained_checkpoint)
    assert (config.hidden, config.embedding_dim, config.seq_len, config.num_labels) == (4, 8, 100, 4)
    assert list(tensors) == list(enhanced.parameter_shapes(config))
    for name, shape in enhanced.parameter_shapes(config).items():
        assert tensors[name].shape == shape and tensors[name].dtype == np.float32
    # The engine's initialisation: the forget-gate quarter of bias_hh starts at 1 (docs/model.md),
    # and 3 steps of Adam at lr 1e-3 leave it near 1, while bias_ih's starts at 0.
    H = config.hidden
    assert np.allclose(tensors["lstm.bias_hh_l0"][H:2 * H], 1.0, atol=0.01)
    assert np.allclose(tensors["lstm.bias_ih_l0"][H:2 * H], 0.0, atol=0.01)


def evaluate(checkpoint, demo_data):
    """enhanced-eval --json of a checkpoint on the demo test set."""
    return json.loads(run_app("enhanced-eval", "--data", demo_data / "test.ebin", "--checkpoint",
                              checkpoint, "--json", "--device", "cpu").stdout)


def test_saved_checkpoint_is_what_the_engine_evaluates(trained_checkpoint, demo_data, tmp_path):
    config, tensors = enhanced.load_checkpoint(trained_checkpoint)
    copy = tmp_path / "copy.safetensors"
    enhanced.save_checkpoint(copy, config, tensors)
    original, again = evaluate(trained_checkpoint, demo_data), evaluate(copy, demo_data)
    assert again["loss"] == original["loss"] and again["accuracy"] == original["accuracy"]


def test_changed_weights_change_the_engine_result(trained_checkpoint, demo_data, tmp_path):
    config, tensors = enhanced.load_checkpoint(trained_checkpoint)
    tensors["dense.bias"] = tensors["dense.bias"] + np.arange(config.num_labels, dtype=np.float32)
    changed = tmp_path / "changed.safetensors"
    enhanced.save_checkpoint(changed, config, tensors)
    original, again = evaluate(trained_checkpoint, demo_data), evaluate(changed, demo_data)
    assert again["loss"] != original["loss"]


def test_bad_tensors_are_refused_and_leave_no_file(trained_checkpoint, tmp_path):
    config, tensors = enhanced.load_checkpoint(trained_checkpoint)
    target = tmp_path / "bad.safetensors"
    cases = {
        "missing": ({k: v for k, v in tensors.items() if k != "dense.bias"}, "missing tensors \\['dense.bias'\\]"),
        "shape": ({**tensors, "dense.bias": np.zeros(config.num_labels + 1, np.float32)}, "dense.bias.*shape"),
        "nan": ({**tensors, "dense.bias": np.full(config.num_labels, np.nan, np.float32)}, "element 0 is nan"),
        "unknown": ({**tensors, "extra": np.zeros(1, np.float32)}, "unknown tensors \\['extra'\\]"),
    }
    for name, (bad, message) in cases.items():
        with pytest.raises(ValueError, match=message):
            enhanced.save_checkpoint(target, config, bad)
        assert not target.exists(), name
    assert not list(tmp_path.iterdir())


def test_not_a_checkpoint(tmp_path):
    path = tmp_path / "plain.safetensors"
    enhanced.write_safetensors(path, {"x": np.zeros(2, np.float32)})
    with pytest.raises(ValueError, match="not an engine checkpoint"):
        enhanced.load_checkpoint(path)
    path.write_bytes(b"\x05\x00")
    with pytest.raises(ValueError, match="not a safetensors file"):
        enhanced.load_checkpoint(path)
    with pytest.raises(ValueError, match="hidden must be a positive integer"):
        enhanced.ModelConfig(vocab_size=10, num_labels=2, hidden=0)


@pytest.mark.parametrize("umask", [0o022, 0o002, 0o077])
def test_written_files_have_the_mode_of_a_plain_open(trained_checkpoint, tmp_path, umask):
    """write_ebin, save_checkpoint and export_onnx follow the umask as open() does (tempfile alone
    would make them 0600)."""
    config, tensors = enhanced.load_checkpoint(trained_checkpoint)
    samples = [[[[1, 2], [], [3]], [[], [4], [5]]]]
    previous = os.umask(umask)
    try:
        with open(tmp_path / "plain", "wb"):
            pass
        enhanced.write_ebin(tmp_path / "data.ebin", samples, labels=[1])
        enhanced.save_checkpoint(tmp_path / "copy.safetensors", config, tensors)
        written = [tmp_path / "data.ebin", tmp_path / "copy.safetensors"]
        try:
            from enhanced.onnx import export_onnx
            written.append(export_onnx((config, tensors), tmp_path / "model.onnx"))
        except ImportError:  # onnx is optional
            pass
    finally:
        os.umask(previous)
    expected = stat.S_IMODE(os.stat(tmp_path / "plain").st_mode)
    assert expected == 0o666 & ~umask
    for path in written:
        assert stat.S_IMODE(os.stat(path).st_mode) == expected, path
    if umask == previous:  # the engine's own checkpoint, written under the same umask
        assert stat.S_IMODE(os.stat(trained_checkpoint).st_mode) == expected


NAMES = ["admin", "devel, tools", "say \"hi\"", "Überraschung"]


@pytest.fixture(scope="module")
def named_checkpoint(demo_data, tmp_path_factory):
    """A checkpoint trained with --label-names (the demo's four labels)."""
    directory = tmp_path_factory.mktemp("named")
    names = directory / "names.txt"
    names.write_text("".join(name + "\n" for name in NAMES), encoding="utf-8")
    run_app("enhanced-train", "--data", demo_data / "train.ebin", "--out", directory / "run", "--steps", 3,
            "--hidden", 4, "--embedding-dim", 8, "--device", "cpu", "--quiet", "--label-names", names)
    return directory / "run" / "last.safetensors"


def test_label_names_of_a_run_given_them(named_checkpoint, trained_checkpoint):
    assert enhanced.checkpoint.load_label_names(named_checkpoint) == NAMES
    assert enhanced.checkpoint.load_label_names(trained_checkpoint) is None
    # The engine's text of them is the one Python writes.
    _, metadata = enhanced.read_safetensors(named_checkpoint)
    assert metadata["label_names"] == enhanced.checkpoint.label_names_json(NAMES)


def test_saved_label_names_reach_the_engine(trained_checkpoint, demo_data, tmp_path):
    config, tensors = enhanced.load_checkpoint(trained_checkpoint)
    named = tmp_path / "named.safetensors"
    enhanced.save_checkpoint(named, config, tensors, label_names=NAMES)
    assert enhanced.checkpoint.load_label_names(named) == NAMES
    report = evaluate(named, demo_data)
    assert report["label_names"] == NAMES
    assert [label["name"] for label in report["labels"]] == NAMES
    # Without names the file is what it was before names existed.
    plain = tmp_path / "plain.safetensors"
    enhanced.save_checkpoint(plain, config, tensors)
    assert enhanced.checkpoint.load_label_names(plain) is None
    assert "label_names" not in evaluate(plain, demo_data)


def test_bad_label_names_are_refused_and_leave_no_file(trained_checkpoint, tmp_path):
    config, tensors = enhanced.load_checkpoint(trained_checkpoint)
    target = tmp_path / "bad.safetensors"
    cases = {
        "count": (["a", "b", "c"], "3 label names, but the model has 4 labels"),
        "empty": (["a", "", "c", "d"], "item 1: an empty name"),
        "duplicate": (["a", "b", "a", "d"], "item 2: 'a' is a duplicate"),
        "control": (["a", "b\tc", "c", "d"], "item 1: a control character"),
        "type": (["a", "b", 3, "d"], "item 2 is not a string"),
        "text": ("abcd", "must be a list of names"),
    }
    for name, (names, message) in cases.items():
        with pytest.raises(ValueError, match=message):
            enhanced.save_checkpoint(target, config, tensors, label_names=names)
        assert not target.exists(), name


def test_bad_label_names_metadata_is_refused_on_reading(trained_checkpoint, tmp_path):
    tensors, metadata = enhanced.read_safetensors(trained_checkpoint)
    for text, message in (("not json", "is not a JSON array of names"), ('{"a": 1}', "is not a JSON array of names"),
                          ('["a","b"]', "2 label names, but the model has 4 labels")):
        bad = tmp_path / "bad.safetensors"
        enhanced.write_safetensors(bad, tensors, {**metadata, "label_names": text})
        with pytest.raises(ValueError, match=message):
            enhanced.checkpoint.load_label_names(bad)
