"""The shared corpus of good and bad files (tests/bad-files/, written by make_corpus.py; the engine
is tested on the same files by tests/test_bad_files.cpp): the Python readers accept the good
ones and refuse every bad one with one ValueError that names the file and says what
expected.json says both readers say."""
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import enhanced

CORPUS = Path(__file__).resolve().parents[2] / "tests" / "bad-files"
MANIFEST = json.loads((CORPUS / "expected.json").read_text())


def open_as_the_engine_does(path):
    """A checkpoint as eval, predict and --init-from read it, or a data set."""
    return enhanced.load_checkpoint(path) if path.suffix == ".safetensors" else enhanced.read_ebin(path)


def test_the_corpus_is_what_its_script_writes(tmp_path):
    spec = importlib.util.spec_from_file_location("make_corpus", CORPUS / "make_corpus.py")
    make_corpus = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make_corpus)
    assert make_corpus.write_corpus(tmp_path) == MANIFEST
    written = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    committed = sorted(p.relative_to(CORPUS) for p in CORPUS.rglob("*") if p.is_file() and p.suffix != ".py")
    assert written == committed
    for relative in written:
        assert (tmp_path / relative).read_bytes() == (CORPUS / relative).read_bytes(), relative


@pytest.mark.parametrize("relative", MANIFEST["accept"])
def test_good_files_open(relative):
    open_as_the_engine_does(CORPUS / relative)


@pytest.mark.parametrize("relative", sorted(MANIFEST["refuse"]))
def test_every_bad_file_is_one_value_error_naming_it(relative):
    path = CORPUS / relative
    with pytest.raises(ValueError) as error:
        open_as_the_engine_does(path)
    message = str(error.value)
    assert message.startswith(f"{path}: "), message
    assert MANIFEST["refuse"][relative] in message
    assert "\n" not in message and len(message) <= len(str(path)) + 300, message


def test_deep_nesting_is_refused_before_json_recurses(tmp_path):
    """100,000 nested lists as a shape (200 KB): a ValueError at the fourth level, not RecursionError."""
    depth = 100_000
    header = f'{{"w": {{"dtype": "F32", "shape": {"[" * depth}{"]" * depth}, "data_offsets": [0, 4]}}}}'.encode()
    path = tmp_path / "deep.safetensors"
    path.write_bytes(len(header).to_bytes(8, "little") + header + bytes(4))
    with pytest.raises(ValueError, match=r"deep.safetensors: header nests deeper than 3 levels .*, at byte 41$"):
        enhanced.read_safetensors(path)


def test_padded_file_is_refused_before_its_data_is_read(tmp_path):
    """A checkpoint padded to 2 GiB (sparse): refused by its size, the bound named, in a process
    whose peak memory is that of loading the good checkpoint, not of holding the file."""
    good = CORPUS / "safetensors" / "good-checkpoint.safetensors"
    path = tmp_path / "padded.safetensors"
    path.write_bytes(good.read_bytes())
    os.truncate(path, 2**31)
    script = ("import resource, sys, enhanced\n"
              "try:\n    enhanced.load_checkpoint(sys.argv[1])\n    print('loaded')\nexcept ValueError as e:\n    print(e)\n"
              "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)\n")

    def load(checkpoint):
        result = subprocess.run([sys.executable, "-c", script, str(checkpoint)], capture_output=True, text=True,
                                timeout=300, check=True,
                                env={**os.environ, "PYTHONPATH": str(Path(enhanced.__file__).parents[1])})
        message, max_rss_kib = result.stdout.splitlines()
        return message, int(max_rss_kib)
    good_message, good_rss_kib = load(good)
    message, rss_kib = load(path)
    assert good_message == "loaded"
    assert message == f"{path}: 2147483648 bytes, but its tensors end at {good.stat().st_size}"
    assert rss_kib < good_rss_kib + 256 * 1024, (rss_kib, good_rss_kib)


def test_not_a_regular_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in ((tmp_path, "a directory"), ("/dev/zero", "a character device"), (fifo, "a FIFO")):
        for read in (enhanced.read_safetensors, enhanced.load_checkpoint, enhanced.read_ebin):
            with pytest.raises(ValueError, match=f"^{re.escape(str(path))}: not a regular file \\({kind}\\)$"):
                read(path)
    with pytest.raises(ValueError, match="nope.safetensors: cannot open"):
        enhanced.read_safetensors(tmp_path / "nope.safetensors")


def test_exports_refuse_an_int32_tensor(tmp_path):
    """export_onnx reads through load_checkpoint: an I32 dense.bias is refused, not loaded as floats near 1e9."""
    onnx = pytest.importorskip("enhanced.onnx")
    bad = CORPUS / "safetensors" / "dense-bias-i32.safetensors"
    with pytest.raises(ValueError, match="tensor 'dense.bias' is I32, expected F32"):
        onnx.export_onnx(bad, tmp_path / "model.onnx")
    assert not list(tmp_path.iterdir())
