"""enhanced.write_ebin / read_ebin against the engine's own .ebin writer and reader
(`enhanced-data convert`, `enhanced-data inspect`)."""
import json

import numpy as np
import pytest

import enhanced
from enhanced.ebin import HEADER_DTYPE
from conftest import run_app

# (N, T, most identifier ids, most auxiliary ids, labels drawn from): N = 1 and T = 1, all
# identifier lists empty, all auxiliary lists empty, labels with gaps (num_labels = largest + 1).
SHAPES = [(1, 1, 5, 3, [0]), (1, 4, 0, 0, [6]), (7, 3, 5, 0, [0, 3, 7]), (50, 17, 5, 3, [2, 9]),
          (13, 9, 0, 4, [0, 1, 2, 3])]


def random_lists(rng, num_samples, seq_len, most_ids, most_aux, vocab=3000):
    def ids(most):
        return rng.integers(0, vocab, rng.integers(0, most + 1)).tolist()
    return [[[ids(most_ids), ids(most_aux), [int(rng.integers(0, vocab))]] for _ in range(seq_len)]
            for _ in range(num_samples)]


def write_jsonl(path, lists, labels=None):
    with open(path, "w") as f:
        for s, tokens in enumerate(lists):
            line = {"tokens": tokens} if labels is None else {"label": int(labels[s]), "tokens": tokens}
            f.write(json.dumps(line) + "\n")


def csr_of(lists):
    """The CSR form of nested lists, built directly (not through the package)."""
    T = len(lists[0])
    flat = [position for sample in lists for position in sample]
    csr = {"cur_word": np.array([p[2][0] for p in flat]).reshape(-1, T)}
    for field, name in enumerate(("identifier", "auxiliary")):
        csr[f"{name}_lengths"] = np.array([len(p[field]) for p in flat]).reshape(-1, T)
        csr[f"{name}_ids"] = np.array([i for p in flat for i in p[field]], dtype=np.int64)
    return csr


def ragged_of(lists):
    import tensorflow as tf
    T = len(lists[0])
    flat_lists = [ids for sample in lists for position in sample for ids in position]
    values = tf.constant([i for ids in flat_lists for i in ids], tf.int64)
    lists_rt = tf.RaggedTensor.from_row_lengths(values, [len(ids) for ids in flat_lists])
    return tf.RaggedTensor.from_uniform_row_length(tf.RaggedTensor.from_uniform_row_length(lists_rt, 3), T)


def converted(tmp_path, lists, labels, name="engine"):
    jsonl, ebin = tmp_path / f"{name}.jsonl", tmp_path / f"{name}.ebin"
    write_jsonl(jsonl, lists, labels)
    run_app("enhanced-data", "convert", jsonl, ebin, "--seq-len", len(lists[0]))
    return ebin.read_bytes()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: f"N{s[0]}-T{s[1]}-ids{s[2]}-aux{s[3]}")
def test_byte_identical_to_convert_from_every_form(tmp_path, shape):
    num_samples, seq_len, most_ids, most_aux, label_pool = shape
    rng = np.random.default_rng(num_samples * 100 + seq_len)
    lists = random_lists(rng, num_samples, seq_len, most_ids, most_aux)
    labels = rng.choice(label_pool, num_samples)
    labels[0] = max(label_pool)  # the largest label present: num_labels = max + 1 with gaps below
    expected = converted(tmp_path, lists, labels)
    for form, data in (("lists", lists), ("csr", csr_of(lists)), ("ragged", ragged_of(lists))):
        out = tmp_path / f"{form}.ebin"
        enhanced.write_ebin(out, data, labels)
        assert out.read_bytes() == expected, form
    header = np.frombuffer(expected[:128], HEADER_DTYPE)[0]
    assert header["num_labels"] == max(label_pool) + 1 and header["flags"] == 0


def test_read_ebin_round_trips(tmp_path):
    rng = np.random.default_rng(5)
    lists = random_lists(rng, 9, 6, 5, 2)
    labels = rng.integers(0, 4, 9)
    path = tmp_path / "engine.ebin"
    path.write_bytes(converted(tmp_path, lists, labels))
    ebin = enhanced.read_ebin(path)
    assert (ebin.N, ebin.T, len(ebin), ebin.num_labels) == (9, 6, 9, labels.max() + 1)
    assert ebin.to_lists() == lists
    assert np.array_equal(ebin.labels, labels)
    assert isinstance(ebin.cur_word, np.ndarray) and not ebin.cur_word.flags.writeable
    ragged = ebin.to_ragged()
    assert ragged.shape.as_list() == [9, 6, 3, None] and ragged.to_list() == lists
    assert ragged[:, :, 0].shape.as_list() == [9, 6, None]  # the T axis is uniform
    again = tmp_path / "again.ebin"
    enhanced.write_ebin(again, ebin.to_csr(), ebin.labels)
    assert again.read_bytes() == path.read_bytes()
    part = ebin.to_csr(3, 5)
    assert part["cur_word"].shape == (2, 6) and part["identifier_lengths"].sum() == part["identifier_ids"].size
    enhanced.write_ebin(again, part, labels[3:5])
    assert enhanced.read_ebin(again).to_lists() == lists[3:5]


def test_reads_the_engine_demo_set(demo_data):
    ebin = enhanced.read_ebin(demo_data / "test.ebin")
    lines = (demo_data / "test.jsonl").read_text().splitlines()
    first, last = json.loads(lines[0]), json.loads(lines[-1])
    assert len(ebin) == len(lines)
    lists = ebin.to_lists()
    assert lists[0] == first["tokens"] and lists[-1] == last["tokens"]
    assert ebin.labels[0] == first["label"] and ebin.labels[-1] == last["label"]


def test_unlabeled_layout(tmp_path):
    """The flag of docs/data-format.md: no labels section, labels_offset 0, num_labels 0, the other
    sections those of the labeled file moved down by the labels' padded size."""
    rng = np.random.default_rng(2)
    lists = random_lists(rng, 5, 4, 3, 2)
    labeled, unlabeled = tmp_path / "labeled.ebin", tmp_path / "unlabeled.ebin"
    enhanced.write_ebin(labeled, lists, np.arange(5))
    enhanced.write_ebin(unlabeled, lists)
    a, b = labeled.read_bytes(), unlabeled.read_bytes()
    ha, hb = np.frombuffer(a[:128], HEADER_DTYPE)[0], np.frombuffer(b[:128], HEADER_DTYPE)[0]
    shift = int(ha["cur_word_offset"]) - 128  # 4 N rounded up to 8
    assert (hb["flags"], hb["labels_offset"], hb["num_labels"], hb["cur_word_offset"]) == (1, 0, 0, 128)
    assert hb["file_size"] == ha["file_size"] - shift == len(b)
    assert b[128:] == a[128 + shift:]
    ebin = enhanced.read_ebin(unlabeled)
    assert ebin.unlabeled and ebin.labels is None and ebin.to_lists() == lists


def convert_unlabeled(tmp_path, lists):
    """The engine's .ebin of unlabeled samples, or None (with its error) where this engine's
    convert does not take JSON Lines without "label" yet."""
    jsonl, ebin = tmp_path / "unlabeled.jsonl", tmp_path / "engine.ebin"
    write_jsonl(jsonl, lists)
    result = run_app("enhanced-data", "convert", jsonl, ebin, "--seq-len", len(lists[0]), check=False)
    return (ebin, None) if result.returncode == 0 else (None, result.stderr.strip())


def test_unlabeled_byte_identical_to_convert(tmp_path):
    rng = np.random.default_rng(3)
    lists = random_lists(rng, 6, 5, 4, 2)
    ebin, error = convert_unlabeled(tmp_path, lists)
    if ebin is None:
        pytest.skip(f"this engine's enhanced-data convert does not take unlabeled JSON Lines yet ({error})")
    ours = tmp_path / "ours.ebin"
    enhanced.write_ebin(ours, lists)
    assert ours.read_bytes() == ebin.read_bytes()


def bad_inputs():
    """(name, nested lists or a CSR dict, labels, what the message must name)."""
    good = [[[[1, 2], [], [3]], [[], [4], [5]]], [[[6], [], [7]], [[8, 9], [], [0]]]]

    def lists_with(s, t, position):
        data = json.loads(json.dumps(good))
        data[s][t] = position
        return data

    csr = csr_of(good)
    yield "cur_word empty", lists_with(1, 0, [[6], [], []]), [0, 1], "sample 1: position 0: field 2 .cur_word. must hold exactly one id, got 0"
    yield "cur_word two", lists_with(0, 1, [[], [4], [5, 6]]), [0, 1], "sample 0: position 1: field 2 .cur_word. must hold exactly one id, got 2"
    yield "negative id", lists_with(1, 1, [[8, -9], [], [0]]), [0, 1], "sample 1: position 1: field 0 .identifier. has negative id -9"
    yield "id over int32", lists_with(0, 1, [[], [2**31], [5]]), [0, 1], "sample 0: position 1: field 1 .auxiliary. id 2147483648 does not fit int32"
    yield "id over int64", lists_with(0, 1, [[], [2**70], [5]]), [0, 1], "sample 0: position 1: field 1 .auxiliary. id 1180591620717411303424 does not fit int32"
    yield "float id", lists_with(1, 0, [[6.5], [], [7]]), [0, 1], "sample 1: position 0: field 0 .identifier. holds a non-integer number 6.5"
    yield "integral float id", lists_with(1, 0, [[6], [], [7.0]]), [0, 1], "sample 1: position 0: field 2 .cur_word. holds a non-integer number 7.0"
    yield "nan id", lists_with(0, 0, [[float("nan")], [], [3]]), [0, 1], "sample 0: position 0: field 0 .identifier. holds a non-integer number nan"
    yield "string id", lists_with(0, 0, [["1"], [], [3]]), [0, 1], "sample 0: position 0: field 0 .identifier. holds str"
    yield "bool id", lists_with(1, 1, [[2], [True], [3]]), [0, 1], "sample 1: position 1: field 1 .auxiliary. holds bool True"
    yield "bytes ids", lists_with(0, 0, [b"\x01\x02", [], [3]]), [0, 1], "sample 0: position 0: field 0 .identifier. holds bytes"
    yield "bytes position", lists_with(0, 1, b"\x01\x02\x03"), [0, 1], "sample 0: position 1: expected exactly 3 lists, got bytes"
    yield "two fields", lists_with(1, 1, [[8], [0]]), [0, 1], "sample 1: position 1: expected exactly 3 lists, got 2 elements"
    yield "four fields", lists_with(0, 1, [[], [], [1], []]), [0, 1], "sample 0: position 1: expected exactly 3 lists, got 4 elements"
    yield "number for a list", lists_with(0, 1, [[], 4, [5]]), [0, 1], "sample 0: position 1: field 1 .auxiliary. holds int, expected a list"
    yield "ragged T", [good[0], good[1] + [[[1], [], [2]]]], [0, 1], "sample 1: expected 2 positions .as sample 0., got 3"
    yield "negative label", good, [0, -1], "sample 1: negative label -1"
    yield "label over int32", good, [2**31 - 1, 0], "sample 0: label 2147483647 does not fit int32"
    yield "float label", good, [0.0, 1.5], "sample 1: label 1.5 is a float64 number"
    yield "label count", good, [0], "one label for each of the 2 samples"
    yield "no samples", [], None, "no samples"
    yield "csr negative", {**csr, "identifier_ids": csr["identifier_ids"] - 5}, [0, 1], "sample 0: position 0: field 0 .identifier. has negative id -4"
    yield "csr nan", {**csr, "auxiliary_ids": np.array([np.nan])}, [0, 1], "sample 0: position 1: field 1 .auxiliary. holds nan"
    yield "csr float", {**csr, "cur_word": csr["cur_word"] + 0.5}, [0, 1], "sample 0: position 0: field 2 .cur_word. holds 3.5"
    yield "csr lengths", {**csr, "identifier_lengths": csr["identifier_lengths"] + 1}, [0, 1], "identifier_lengths sum to 9, but identifier_ids holds 5 ids"
    # Lengths whose int64 sum wraps round to the 2 ids given: 4 * 2^62 + 2 = 2^64 + 2.
    wrapping = np.array([[2**62, 2**62], [2**62, 2**62 + 2]])
    yield "csr lengths wrap int64", {**csr, "identifier_lengths": wrapping, "identifier_ids": np.array([5, 6])}, [0, 1], \
        "identifier_lengths sum to about 1.84e\\+19 \\(beyond 2\\^62, where an int64 sum wraps\\), but identifier_ids holds 2 ids"
    yield "csr negative length", {**csr, "auxiliary_lengths": np.array([[0, 2], [-1, 0]])}, [0, 1], "sample 1: position 0: field 1 .auxiliary. has negative length -1"
    yield "csr key", {k: v for k, v in csr.items() if k != "cur_word"}, [0, 1], "missing \\['cur_word'\\]"
    three = csr_of(good + [[[[1], [2], [3]], [[4], [], [5]]]])  # N = 3, T = 2
    yield "csr lengths (T, N)", {**three, "identifier_lengths": three["identifier_lengths"].T.copy()}, [0, 1, 0], \
        "identifier_lengths: expected \\(N, T\\) = \\(3, 2\\) lengths, got shape \\[2, 3\\]"


@pytest.mark.parametrize("case", list(bad_inputs()), ids=lambda c: c[0])
def test_bad_input_names_the_place_and_leaves_no_file(tmp_path, case):
    _, data, labels, message = case
    target = tmp_path / "out.ebin"
    with pytest.raises(ValueError, match=message):
        enhanced.write_ebin(target, data, labels)
    assert not list(tmp_path.iterdir())
    target.write_bytes(b"previous")  # a failed write leaves an existing file as it was
    with pytest.raises(ValueError):
        enhanced.write_ebin(target, data, labels)
    assert [p.name for p in tmp_path.iterdir()] == ["out.ebin"] and target.read_bytes() == b"previous"


def test_bad_ragged_tensor(tmp_path):
    import tensorflow as tf
    lists = [[[[1], [], [2]], [[3.5], [], [4]]]]
    floats = tf.RaggedTensor.from_uniform_row_length(tf.RaggedTensor.from_uniform_row_length(
        tf.RaggedTensor.from_row_lengths([1.0, 2.0, 3.5, 4.0], [1, 0, 1, 1, 0, 1]), 3), 2)
    assert floats.to_list() == lists
    with pytest.raises(ValueError, match="sample 0: position 1: field 0 .identifier. holds 3.5"):
        enhanced.write_ebin(tmp_path / "x.ebin", floats, [0])
    ragged_t = tf.ragged.constant([[[[1], [], [2]]], [[[1], [], [2]], [[1], [], [2]]]])
    with pytest.raises(ValueError, match="sample 1: expected 1 positions .as sample 0., got 2"):
        enhanced.write_ebin(tmp_path / "x.ebin", ragged_t, [0, 0])
    assert not list(tmp_path.iterdir())


def corrupt(data, offset, dtype, value):
    data = bytearray(data)
    data[offset:offset + np.dtype(dtype).itemsize] = np.array(value, dtype).tobytes()
    return bytes(data)


def test_bad_files_are_refused_like_the_engine_does(tmp_path):
    lists = [[[[1, 2], [], [3]], [[], [4], [5]]], [[[6], [], [7]], [[8, 9], [], [0]]]]
    good = tmp_path / "good.ebin"
    enhanced.write_ebin(good, lists, [0, 2])
    data = good.read_bytes()
    header = np.frombuffer(data[:128], HEADER_DTYPE)[0]
    ids_at, labels_at = int(header["identifier_ids_offset"]), int(header["labels_offset"])
    # Flags are known to the engine from the change that added unlabeled files (its convert takes
    # JSON Lines without "label"); an older engine reads them as reserved bytes.
    engine_knows_flags = convert_unlabeled(tmp_path, lists)[0] is not None
    cases = {
        "truncated": (data[:-8], "truncated: header says"),
        "short": (data[:100], "truncated: 100 bytes"),
        "magic": (b"X" + data[1:], "bad magic"),
        "version": (corrupt(data, 8, "<u4", 2), "unsupported version 2"),
        "flags": (corrupt(data, 104, "<u4", 6), "unknown flags 0x6"),
        "unlabeled with labels": (corrupt(data, 104, "<u4", 1), "unlabeled, yet labels_offset"),
        "negative id": (corrupt(data, ids_at + 4 * 2, "<i4", -2), "sample 1: position 0: field 0 .identifier. has negative id -2"),
        "max id": (corrupt(data, 28, "<i4", 8), "header says the largest id is 8 but the data holds 9"),
        "label": (corrupt(data, labels_at + 4, "<i4", 3), "sample 1: label 3 >= num_labels 3"),
        "num_labels": (corrupt(data, 24, "<u4", 4), "header says 4 labels but the largest label is 2"),
        "offsets": (corrupt(data, int(header["identifier_offsets_offset"]) + 8 * 2, "<u8", 1),
                    "sample 0: position 1: field 0 .identifier. offsets out of range: 2 .. 1 .5 ids in all."),
        "alignment": (corrupt(data, 56, "<u8", int(header["cur_word_offset"]) + 4), "not 8-byte aligned"),
        "json": (b'{"label": 0, "tokens": []}\n', "looks like JSON Lines"),
        "empty": (b"", "empty file"),
    }
    for name, (content, message) in cases.items():
        path = tmp_path / f"{name.replace(' ', '_')}.ebin"
        path.write_bytes(content)
        with pytest.raises(ValueError, match=message) as error:
            enhanced.read_ebin(path)
        assert str(path) in str(error.value), name
        if ("flags" in name or "unlabeled" in name) and not engine_knows_flags:
            continue
        engine = run_app("enhanced-data", "inspect", path, check=False)
        assert engine.returncode != 0, f"{name}: the engine opened what read_ebin refuses"
    run_app("enhanced-data", "inspect", good)
