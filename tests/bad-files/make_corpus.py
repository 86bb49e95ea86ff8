#!/usr/bin/env python3
"""Writes the shared corpus of good and bad files that both readers of each format are tested on
(tests/test_bad_files.cpp: the engine's; python/tests/test_bad_files.py: the Python package's):
safetensors/*.safetensors (engine checkpoints of a tiny model, then each broken one way) and
ebin/*.ebin (a tiny data set, then each broken one way), and expected.json: the files both
readers accept, and for every other file a substring that both readers' errors contain.

Standard library only, deterministic: rerunning it rewrites the same bytes (the tests check that
the committed files are what it writes). Usage: make_corpus.py [DIR] (default: beside this script).
"""
import json
import math
import os
import struct
import sys

# ---- safetensors: an engine checkpoint of V = 3, D = 2, H = 1, T = 2, L = 2 ---------------------

METADATA = {"format": "enhanced-checkpoint", "format_version": "1", "vocab_size": "3", "embedding_dim": "2",
            "hidden": "1", "seq_len": "2", "num_labels": "2", "blend": "mean", "pool": "feature"}
SHAPES = {"embedding.weight": [3, 2], "lstm.weight_ih_l0": [4, 2], "lstm.weight_ih_l0_reverse": [4, 2],
          "lstm.weight_hh_l0": [4, 1], "lstm.weight_hh_l0_reverse": [4, 1], "lstm.bias_ih_l0": [4],
          "lstm.bias_ih_l0_reverse": [4], "lstm.bias_hh_l0": [4], "lstm.bias_hh_l0_reverse": [4],
          "dense.weight": [2, 2], "dense.bias": [2]}


def float_bytes(count, start):
    """`count` float32 values, exact in binary (multiples of 1/8), different for each tensor."""
    return struct.pack(f"<{count}f", *(((start + i) % 7 - 3) / 8 for i in range(count)))


def model_tensors():
    """name -> (dtype, shape, bytes) of the good checkpoint."""
    return {name: ("F32", shape, float_bytes(math.prod(shape), k)) for k, (name, shape) in enumerate(SHAPES.items())}


def safetensors_bytes(tensors, metadata=METADATA, pad=True, order=None):
    """A file of `tensors` (name -> (dtype, shape, bytes)), their data in `order` (default: the
    header's), the header padded with spaces to a multiple of 8 when `pad`."""
    header, offset = {"__metadata__": metadata}, 0
    for name in order or tensors:
        dtype, shape, data = tensors[name]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    header = {name: header[name] for name in ["__metadata__", *tensors]}
    return header_file(json.dumps(header), b"".join(tensors[name][2] for name in order or tensors), pad)


def header_file(text, data=b"", pad=True):
    """8-byte length, the header text, the data."""
    text = text.encode("utf-8") if isinstance(text, str) else text
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def edited_header(edit, data=None):
    """The good checkpoint with its header (a dict) changed by `edit(header)`; its data unless `data`."""
    tensors = model_tensors()
    good = safetensors_bytes(tensors)
    header = json.loads(good[8:8 + struct.unpack("<Q", good[:8])[0]])
    edit(header)
    return header_file(json.dumps(header), b"".join(t[2] for t in tensors.values()) if data is None else data)


def with_tensor(name, dtype=None, shape=None, data=None, metadata=METADATA):
    tensors = model_tensors()
    old = tensors[name]
    tensors[name] = (dtype or old[0], shape or old[1], old[2] if data is None else data)
    return safetensors_bytes(tensors, metadata)


def set_entry(name, **fields):
    def edit(header):
        header[name].update(fields)
    return edit


def without_key(name, key):
    def edit(header):
        del header[name][key]
    return edit


def set_metadata(key, value):
    def edit(header):
        header["__metadata__"][key] = value
    return edit


def shifted_offsets(header):
    """dense.bias moved 4 bytes down into dense.weight, the data 4 bytes shorter."""
    begin, end = header["dense.bias"]["data_offsets"]
    header["dense.bias"]["data_offsets"] = [begin - 4, end - 4]


def gap_offsets(header):
    """dense.bias moved 8 bytes up, leaving 8 unused bytes before it (the data 8 bytes longer)."""
    begin, end = header["dense.bias"]["data_offsets"]
    header["dense.bias"]["data_offsets"] = [begin + 8, end + 8]


def safetensors_cases():
    """file name -> (bytes, the substring both readers' errors contain, or None: both accept)."""
    tensors = model_tensors()
    good = safetensors_bytes(tensors)
    data = b"".join(t[2] for t in tensors.values())
    long_name = "n" * 1000
    nested = '{"w": {"dtype": "F32", "shape": [[[1]]], "data_offsets": [0, 4]}}'
    cases = {
        "good-checkpoint.safetensors": (good, None),
        "good-unpadded-header.safetensors": (safetensors_bytes(tensors, pad=False), None),
        "good-data-in-another-order.safetensors": (safetensors_bytes(tensors, order=sorted(tensors, reverse=True)), None),
        "empty.safetensors": (b"", "not a safetensors file (0 bytes"),
        "short.safetensors": (b"\x05\x00\x00", "not a safetensors file (3 bytes"),
        "header-past-the-end.safetensors": (struct.pack("<Q", 64) + b"{}", "header of 64 bytes, file has 10"),
        "header-length-2-40.safetensors": (struct.pack("<Q", 2**40) + b"{}" * 8,
                                           "header of 1099511627776 bytes, more than the format's 100000000"),
        "header-not-json.safetensors": (header_file("{'w': 1}"), "header is not valid JSON"),
        "header-nan.safetensors": (header_file('{"w": NaN}'), "header is not valid JSON"),
        "header-not-utf8.safetensors": (header_file(b'{"\xff\xfe": {}}'), "header is not valid JSON"),
        "header-a-list.safetensors": (header_file("[]"), "header is not a JSON object"),
        "nested-shape.safetensors": (header_file(nested, bytes(4)), "header nests deeper than 3 levels (object, "
                                     f"tensor, shape), at byte {8 + nested.index('[[') + 1}"),
        "nested-metadata.safetensors": (header_file('{"__metadata__": {"a": [[]]}}'), "header nests deeper than 3 levels"),
        "good-brackets-in-strings.safetensors": (safetensors_bytes(tensors, {**METADATA, "note": '[[{{\\"[[\\'}), None),
        "metadata-a-list.safetensors": (edited_header(lambda h: h.update({"__metadata__": ["x"]})),
                                        "__metadata__ is not an object"),
        "metadata-not-a-string.safetensors": (edited_header(set_metadata("hidden", 1)), "metadata 'hidden' is not a string"),
        "metadata-beyond-int.safetensors": (edited_header(set_metadata("hidden", "4294967299")),
                                            "metadata 'hidden' is 4294967299, outside -2147483648..2147483647"),
        "metadata-not-an-integer.safetensors": (edited_header(set_metadata("seq_len", " 2")),
                                                "metadata 'seq_len' is not an integer: ' 2'"),
        "metadata-long-value.safetensors": (edited_header(set_metadata("seq_len", "x" * 10000)),
                                            "metadata 'seq_len' is not an integer: '" + "x" * 60 + "...'"),
        "entry-not-an-object.safetensors": (edited_header(lambda h: h.update({"dense.bias": 3})),
                                            "tensor 'dense.bias': entry is not an object"),
        "entry-without-offsets.safetensors": (edited_header(without_key("dense.bias", "data_offsets")),
                                              "tensor 'dense.bias': malformed entry (no 'data_offsets')"),
        "dtype-not-a-string.safetensors": (edited_header(set_entry("dense.bias", dtype=["F32"])),
                                           "tensor 'dense.bias': dtype is not a string"),
        "dtype-f16.safetensors": (edited_header(set_entry("dense.bias", dtype="F16", shape=[4])),
                                  "tensor 'dense.bias': unsupported dtype F16"),
        "dense-bias-i32.safetensors": (with_tensor("dense.bias", dtype="I32", data=struct.pack("<2i", 10**9, -7)),
                                       "tensor 'dense.bias' is I32, expected F32"),
        "shape-not-a-list.safetensors": (edited_header(set_entry("dense.bias", shape=2)),
                                         "tensor 'dense.bias': shape is not a list"),
        "shape-string.safetensors": (edited_header(set_entry("dense.bias", shape=["2"])),
                                     "tensor 'dense.bias': shape holds \"2\", expected integers"),
        "shape-bool.safetensors": (edited_header(set_entry("dense.bias", shape=[True, 2])),
                                   "tensor 'dense.bias': shape holds true, expected integers"),
        "shape-fraction.safetensors": (edited_header(set_entry("dense.bias", shape=[2.0])),
                                       "tensor 'dense.bias': shape holds 2.0, expected integers"),
        "shape-negative.safetensors": (edited_header(set_entry("dense.bias", shape=[-2, -1])),
                                       "tensor 'dense.bias': negative extent in shape [-2, -1]"),
        "shape-overflows.safetensors": (edited_header(set_entry("embedding.weight", shape=[2**32, 2**32])),
                                        "tensor 'embedding.weight': shape [4294967296, 4294967296] of F32 has more bytes"),
        "shape-for-other-bytes.safetensors": (edited_header(set_entry("dense.bias", shape=[3])),
                                              "tensor 'dense.bias': 8 bytes do not match shape [3] of F32 (12 bytes)"),
        "shape-not-the-model.safetensors": (with_tensor("dense.bias", shape=[3], data=float_bytes(3, 0)),
                                            "tensor 'dense.bias' has shape [3]"),
        "offsets-three.safetensors": (edited_header(set_entry("dense.bias", data_offsets=[0, 4, 8])),
                                      "tensor 'dense.bias': data_offsets must hold 2 non-negative integers, got [0,4,8]"),
        "offsets-negative.safetensors": (edited_header(set_entry("dense.bias", data_offsets=[-8, 0])),
                                         "tensor 'dense.bias': data_offsets must hold 2 non-negative integers"),
        "offsets-reversed.safetensors": (edited_header(set_entry("dense.bias", data_offsets=[8, 0])),
                                         "tensor 'dense.bias': data [8, 0) outside"),
        "offsets-past-the-data.safetensors": (edited_header(set_entry("dense.bias", data_offsets=[len(data), len(data) + 8])),
                                              f"tensor 'dense.bias': data [{len(data)}, {len(data) + 8}) outside the {len(data)}-byte data section"),
        "offsets-overlap.safetensors": (edited_header(shifted_offsets, data[:-4]),
                                        f"tensor 'dense.bias': data [{len(data) - 12}, {len(data) - 4}) overlaps tensor 'dense.weight'"),
        "offsets-leave-a-gap.safetensors": (edited_header(gap_offsets, data[:-8] + bytes(8) + data[-8:]),
                                            f"tensor 'dense.bias': data [{len(data)}, {len(data) + 8}) leaves bytes "
                                            f"[{len(data) - 8}, {len(data)}) of the data section unused"),
        "trailing-bytes.safetensors": (good + bytes(64), f"{len(good) + 64} bytes, but its tensors end at {len(good)}"),
        "value-nan.safetensors": (with_tensor("dense.bias", data=struct.pack("<2f", float("nan"), 0)),
                                  "tensor 'dense.bias' element 0 is nan"),
        "tensor-missing.safetensors": (safetensors_bytes({k: v for k, v in tensors.items() if k != "dense.bias"}),
                                       "'dense.bias'"),
        "long-name-unsupported-dtype.safetensors": (edited_header(lambda h: h.update({long_name: {
            "dtype": "X" * 1000, "shape": [0], "data_offsets": [0, 0]}})),
            f"tensor '{'n' * 60}...': unsupported dtype {'X' * 60}..."),
    }
    return cases


# ---- .ebin: 2 samples of T = 2 (docs/data-format.md) --------------------------------------------

HEADER = struct.Struct("<8sIIQIiQQQQQQQQQI20s")
assert HEADER.size == 128
FIELDS = ("magic", "version", "seq_len", "num_samples", "num_labels", "max_token_id", "num_identifier_ids",
          "num_auxiliary_ids", "labels_offset", "cur_word_offset", "identifier_offsets_offset",
          "identifier_ids_offset", "auxiliary_offsets_offset", "auxiliary_ids_offset", "file_size", "flags",
          "reserved")
# Each position: (identifier ids, auxiliary ids, cur_word).
SAMPLES = [[([1, 2], [], 3), ([], [4], 5)], [([6], [], 7), ([8, 9], [], 0)]]
LABELS = [0, 2]


def ebin_parts(samples=SAMPLES, labels=LABELS):
    """(header dict, sections in file order) of the samples, laid out as lay_out_sections does."""
    positions = [p for sample in samples for p in sample]
    identifier = [i for p in positions for i in p[0]]
    auxiliary = [i for p in positions for i in p[1]]

    def ends(field):
        out, total = [0], 0
        for p in positions:
            total += len(p[field])
            out.append(total)
        return out
    sections = [("labels_offset", struct.pack(f"<{len(labels)}i", *labels) if labels is not None else None),
                ("cur_word_offset", struct.pack(f"<{len(positions)}i", *(p[2] for p in positions))),
                ("identifier_offsets_offset", struct.pack(f"<{len(positions) + 1}Q", *ends(0))),
                ("identifier_ids_offset", struct.pack(f"<{len(identifier)}i", *identifier)),
                ("auxiliary_offsets_offset", struct.pack(f"<{len(positions) + 1}Q", *ends(1))),
                ("auxiliary_ids_offset", struct.pack(f"<{len(auxiliary)}i", *auxiliary))]
    header = {"magic": b"ENHDATA\0", "version": 1, "seq_len": len(samples[0]), "num_samples": len(samples),
              "num_labels": max(labels) + 1 if labels else 0,
              "max_token_id": max([*identifier, *auxiliary, *(p[2] for p in positions)], default=-1),
              "num_identifier_ids": len(identifier), "num_auxiliary_ids": len(auxiliary), "labels_offset": 0,
              "flags": 0 if labels is not None else 1, "reserved": bytes(20)}
    at = 128
    for field, data in sections:
        if data is not None:
            header[field] = at
            at = (at + len(data) + 7) // 8 * 8
    header["file_size"] = at
    return header, [data for _, data in sections if data is not None]


def ebin_bytes(header, sections):
    out = bytearray(HEADER.pack(*(header[f] for f in FIELDS)))
    for data in sections:
        out += data + bytes((8 - len(data) % 8) % 8)
    return bytes(out)


def edited_ebin(labels=LABELS, **fields):
    """The good data set with header fields replaced."""
    header, sections = ebin_parts(labels=labels)
    header.update(fields)
    return ebin_bytes(header, sections)


def ebin_cases():
    header, sections = ebin_parts()
    good = ebin_bytes(header, sections)
    unlabeled = ebin_bytes(*ebin_parts(labels=None))
    at = {field: header[field] for field in FIELDS if field.endswith("_offset")}
    reserved = bytearray(20)
    reserved[19] = 1
    return {
        "good-labeled.ebin": (good, None),
        "good-unlabeled.ebin": (unlabeled, None),
        "empty.ebin": (b"", "empty file"),
        "json-lines.ebin": (b'{"label": 0, "tokens": []}\n', "looks like JSON Lines"),
        "short.ebin": (good[:100], "truncated: 100 bytes, smaller than the 128-byte header"),
        "truncated.ebin": (good[:-8], f"truncated: header says {len(good)} bytes, file has {len(good) - 8}"),
        "size-mismatch.ebin": (good + bytes(8), f"size mismatch: header says {len(good)} bytes, file has {len(good) + 8}"),
        "magic.ebin": (b"X" + good[1:], "bad magic"),
        "version.ebin": (edited_ebin(version=2), "unsupported version 2"),
        "seq-len-0.ebin": (edited_ebin(seq_len=0), "seq_len (T) is 0"),
        "samples-beyond-the-file.ebin": (edited_ebin(num_samples=2**40), "more than the file can hold"),
        "flags.ebin": (edited_ebin(flags=6), "flags 0x6"),
        "unlabeled-with-labels.ebin": (edited_ebin(flags=1), f"labels_offset is {at['labels_offset']}"),
        "reserved-byte.ebin": (edited_ebin(reserved=bytes(reserved)), "reserved header byte 127 is 1, must be 0"),
        "labels-over-the-header.ebin": (edited_ebin(labels_offset=0), "section labels at offset 0 overlaps the header"),
        "section-unaligned.ebin": (edited_ebin(cur_word_offset=at["cur_word_offset"] + 4),
                                   f"section cur_word at offset {at['cur_word_offset'] + 4} is not 8-byte aligned"),
        "section-past-the-end.ebin": (edited_ebin(identifier_ids_offset=len(good)), "section identifier_ids (offset"),
        "cur-word-into-labels.ebin": (edited_ebin(cur_word_offset=at["labels_offset"]),
                                      f"section cur_word at offset {at['labels_offset']} overlaps section labels"),
        "sections-out-of-order.ebin": (edited_ebin(auxiliary_offsets_offset=at["identifier_offsets_offset"]),
                                       f"section auxiliary_offsets at offset {at['identifier_offsets_offset']} "
                                       "overlaps section identifier_ids"),
        "max-token-id.ebin": (edited_ebin(max_token_id=8), "header says the largest id is 8 but the data holds 9"),
        "num-labels.ebin": (edited_ebin(num_labels=4), "header says 4 labels but the largest label is 2"),
        "label-out-of-range.ebin": (good[:at["labels_offset"] + 4] + struct.pack("<i", 5) + good[at["labels_offset"] + 8:],
                                    "sample 1: label 5 >= num_labels 3"),
        "negative-id.ebin": (good[:at["identifier_ids_offset"] + 8] + struct.pack("<i", -2)
                             + good[at["identifier_ids_offset"] + 12:], "has negative id -2"),
        "offsets-not-from-zero.ebin": (good[:at["auxiliary_offsets_offset"]] + struct.pack("<Q", 1)
                                       + good[at["auxiliary_offsets_offset"] + 8:], "auxiliary_offsets[0] is 1, must be 0"),
    }


def write_corpus(directory):
    """Writes every file and expected.json under `directory`; returns the manifest."""
    manifest = {"accept": [], "refuse": {}}
    for kind, cases in (("safetensors", safetensors_cases()), ("ebin", ebin_cases())):
        os.makedirs(os.path.join(directory, kind), exist_ok=True)
        for name, (content, message) in sorted(cases.items()):
            relative = f"{kind}/{name}"
            with open(os.path.join(directory, relative), "wb") as f:
                f.write(content)
            if message is None:
                manifest["accept"].append(relative)
            else:
                manifest["refuse"][relative] = message
    with open(os.path.join(directory, "expected.json"), "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    return manifest


if __name__ == "__main__":
    write_corpus(sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.abspath(__file__)))
