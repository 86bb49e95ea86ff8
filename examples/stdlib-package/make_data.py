#!/usr/bin/env python3
"""Builds the stdlib-package data set: windows of T tokens cut from the Python standard library's
own source files, each labelled with the top-level package its file belongs to (asyncio, email,
xml, ...). NumPy and the standard library only; deterministic for a given --seed and source tree.

Per position (the engine's (T, 3, ragged) sample):
  field 0  the identifier's sub-tokens (snake_case and camelCase split, lower-cased), each an id;
           empty for keywords, numbers and punctuation
  field 1  the token's kind (KIND_IDS below): carried by the data, not used by the model
  field 2  the token itself, one id (OOV_ID when it is not in the training vocabulary)
Words and sub-tokens share one vocabulary (one embedding table), built from the training files
only. Files, not windows, are split into train/valid/test, so test windows come from unseen files.

Writes into --out: train/valid/test .ebin, vocab.txt (line i = id i), labels.txt (line i = label
i), files.tsv (every file used: split, label, path, tokens, windows), samples-<split>.tsv (per
sample: its file and first token) and summary.json (counts, vocabulary size, chance levels).
"""
import argparse
import collections
import json
import keyword
import os
import re
import subprocess
import sys
import sysconfig
import tempfile

import numpy as np

PAD_ID, OOV_ID = 0, 1
RESERVED = ["<pad>", "<oov>"]
KIND_IDS = {"name": 0, "keyword": 1, "number": 2, "punct": 3, "pad": 4}
SPLITS = ("train", "valid", "test")
# Not labels: encodings/ is 100+ near-identical generated codec tables (trivially recognisable);
# pydoc_data is two data files; the rest are not the standard library's own code.
DEFAULT_EXCLUDE = ("encodings", "pydoc_data", "site-packages", "dist-packages", "__pycache__")

TOKEN_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d[\d_]*(?:\.\d+)?(?:[eE][+-]?\d+)?|\*\*|//|==|!=|<=|>=|->|\S")
CAMEL_RE = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")
KEYWORDS = frozenset(keyword.kwlist)


def tokenize(text):
    """Returns [(token, kind)]: identifiers, keywords, numbers and punctuation (one mark each, or
    a two-character operator); strings and comments are not special, their words are tokens too."""
    tokens = []
    for match in TOKEN_RE.finditer(text):
        tok = match.group()
        first = tok[0]  # a non-ASCII letter or digit is matched alone, by \S: punctuation here
        if first.isascii() and (first.isalpha() or first == "_"):
            kind = "keyword" if tok in KEYWORDS else "name"
        elif first.isascii() and first.isdigit():
            kind = "number"
        else:
            kind = "punct"
        tokens.append((tok, kind))
    return tokens


def split_identifier(name):
    """get_event_loop -> [get, event, loop]; HTTPServer -> [http, server]; __init__ -> [init]."""
    return [piece.lower() for part in name.split("_") for piece in CAMEL_RE.findall(part)]


def discover_files(root, only, exclude, min_files, max_files, min_tokens, rng):
    """Returns {package: [(relative path, tokens)]} for the top-level packages of root (those in
    `only` when given) that have at least min_files .py files of min_tokens tokens or more; at
    most max_files each (a seeded pick)."""
    by_package = {}
    for package in sorted(os.listdir(root)):
        top = os.path.join(root, package)
        if package in exclude or (only and package not in only) or not os.path.isfile(os.path.join(top, "__init__.py")):
            continue
        files = []
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames[:] = sorted(d for d in dirnames if d not in exclude)
            for name in sorted(filenames):
                if name.endswith(".py"):
                    path = os.path.join(dirpath, name)
                    with open(path, encoding="utf-8", errors="replace") as f:
                        tokens = tokenize(f.read())
                    if len(tokens) >= min_tokens:
                        files.append((os.path.relpath(path, root), tokens))
        if len(files) >= min_files:
            if len(files) > max_files:
                keep = np.sort(rng.choice(len(files), size=max_files, replace=False))
                files = [files[i] for i in keep]
            by_package[package] = files
    return by_package


def split_files(by_package, valid_fraction, test_fraction, rng):
    """Per package (stratified), a seeded shuffle of its files: at least one file each in valid
    and test, the rest in train. Returns {split: [(label, path, tokens)]}."""
    splits = {s: [] for s in SPLITS}
    for label, package in enumerate(sorted(by_package)):
        files = by_package[package]
        order = rng.permutation(len(files))
        n_test = max(1, int(round(test_fraction * len(files))))
        n_valid = max(1, int(round(valid_fraction * len(files))))
        for rank, i in enumerate(order):
            split = "test" if rank < n_test else "valid" if rank < n_test + n_valid else "train"
            splits[split].append((label, files[i][0], files[i][1]))
    for split in SPLITS:
        splits[split].sort(key=lambda item: (item[0], item[1]))
    return splits


def build_vocab(train_files, max_size, min_count):
    """Words and identifier sub-tokens of the training files, most frequent first (ties by
    string), those seen at least min_count times, at most max_size entries with the reserved."""
    counts = collections.Counter()
    for _, _, tokens in train_files:
        for tok, kind in tokens:
            counts[tok] += 1
            if kind == "name":
                counts.update(split_identifier(tok))
    ranked = sorted((item for item in counts.items() if item[1] >= min_count), key=lambda kv: (-kv[1], kv[0]))
    words = [w for w, _ in ranked[: max(0, max_size - len(RESERVED))]]
    return RESERVED + words


def window_starts(n_tokens, seq_len, stride, max_windows, min_fill, rng):
    """Windows every `stride` tokens (the last one padded when it holds at least min_fill tokens),
    at most max_windows of them, a seeded pick kept in file order."""
    # A window is kept when it holds min_fill tokens and some the one before it does not.
    starts = [s for s in range(0, n_tokens, stride)
              if n_tokens - s >= min_fill and (s == 0 or s - stride + seq_len < n_tokens)]
    if len(starts) > max_windows:
        starts = [starts[i] for i in np.sort(rng.choice(len(starts), size=max_windows, replace=False))]
    return starts


def encode_file(tokens, ids):
    """Per token of a file: word id, kind id, sub-token count, and the sub-token ids in order."""
    words = np.array([ids.get(tok, OOV_ID) for tok, _ in tokens], dtype=np.int32)
    kinds = np.array([KIND_IDS[kind] for _, kind in tokens], dtype=np.int32)
    subs = [[ids.get(s, OOV_ID) for s in split_identifier(tok)] if kind == "name" else [] for tok, kind in tokens]
    lengths = np.array([len(s) for s in subs], dtype=np.int64)
    return words, kinds, lengths, np.array([i for s in subs for i in s], dtype=np.int32)


def encode_windows(encoded_files, seq_len):
    """CSR samples (the form write_ebin takes) of [(encoded file, window starts)]: cur_word (N, T),
    identifier ids and (N, T) lengths, auxiliary ids (the kind, one per position) and lengths.
    Positions past a file's end are padding: <pad>, no identifier, kind "pad"."""
    cur, id_lengths, id_values, aux = [], [], [], []
    for (words, kinds, lengths, sub_ids), starts in encoded_files:
        ends = np.concatenate([[0], np.cumsum(lengths)])
        for start in starts:
            stop = min(start + seq_len, len(words))
            pad = seq_len - (stop - start)
            cur.append(np.pad(words[start:stop], (0, pad), constant_values=PAD_ID))
            aux.append(np.pad(kinds[start:stop], (0, pad), constant_values=KIND_IDS["pad"]))
            id_lengths.append(np.pad(lengths[start:stop], (0, pad)))
            id_values.append(sub_ids[ends[start]:ends[stop]])
    n = len(cur)
    return {"cur_word": np.array(cur, dtype=np.int32).reshape(n, seq_len),
            "identifier_lengths": np.array(id_lengths, dtype=np.int64).reshape(n, seq_len),
            "identifier_ids": np.concatenate(id_values or [np.zeros(0, np.int32)]).astype(np.int32),
            "auxiliary_lengths": np.ones((n, seq_len), dtype=np.int64),
            "auxiliary_ids": np.array(aux, dtype=np.int32).reshape(-1)}


def jsonl_lines(csr, labels):
    """The same samples as JSON Lines (docs/model.md, "Data at the edges")."""
    n, seq_len = csr["cur_word"].shape
    id_ends = np.cumsum(csr["identifier_lengths"].reshape(-1)).tolist()
    ids, cur, aux = csr["identifier_ids"].tolist(), csr["cur_word"].tolist(), csr["auxiliary_ids"].tolist()
    begin = 0
    for s in range(n):
        tokens = []
        for t in range(seq_len):
            p = s * seq_len + t
            tokens.append([ids[begin:id_ends[p]], [aux[p]], [cur[s][t]]])
            begin = id_ends[p]
        yield json.dumps({"label": int(labels[s]), "tokens": tokens}, separators=(",", ":")) + "\n"


def find_app(app_dir, name):
    path = os.path.join(app_dir, name)
    if not os.access(path, os.X_OK):
        sys.exit(f"error: {path} not found: build the apps (scripts/build) or pass --app-dir")
    return path


def resolve_writer(writer, app_dir):
    """"ebin" (enhanced.write_ebin) or "jsonl" (JSON Lines + enhanced-data convert); "auto" is
    write_ebin where this checkout's package has it. Fails early when the route is not there."""
    import enhanced
    if writer == "auto":
        writer = "ebin" if hasattr(enhanced, "write_ebin") else "jsonl"
    if writer == "ebin" and not hasattr(enhanced, "write_ebin"):
        sys.exit("error: --writer ebin, but this checkout's package (python/) has no enhanced.write_ebin")
    if writer == "jsonl":
        find_app(app_dir, "enhanced-data")
    return writer


def write_split(path, csr, labels, writer, app_dir):
    """Writes one .ebin through enhanced.write_ebin, or the documented route: JSON Lines, then
    `enhanced-data convert` (both write to a temporary and rename). Returns the route taken."""
    if writer == "ebin":
        import enhanced
        enhanced.write_ebin(path, csr, labels)
        return "write_ebin"
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", dir=os.path.dirname(os.path.abspath(path)),
                                     delete=False) as f:
        jsonl = f.name
    try:
        with open(jsonl, "w") as f:
            f.writelines(jsonl_lines(csr, labels))
        seq_len = str(csr["cur_word"].shape[1])
        convert = [find_app(app_dir, "enhanced-data"), "convert", jsonl, path, "--seq-len", seq_len]
        if subprocess.run(convert, stdout=subprocess.DEVNULL).returncode != 0:
            sys.exit(f"error: {path}: enhanced-data convert failed (its message is above)")
    finally:
        os.unlink(jsonl)
    return "jsonl+convert"


def chance_levels(counts):
    total = sum(counts)
    return {"majority": max(counts) / total if total else 0.0, "uniform": 1.0 / len(counts)}


def parse_args(argv):
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--source", default=sysconfig.get_paths()["stdlib"], help="standard library root (default: %(default)s)")
    p.add_argument("--seq-len", "-T", type=int, default=128, help="positions per window")
    p.add_argument("--min-files", type=int, default=10, help="packages with fewer usable files are left out")
    p.add_argument("--max-files", type=int, default=80, help="files kept per package at most (a seeded pick)")
    p.add_argument("--train-stride", type=int, help="tokens between training windows (default T/2: overlapping; "
                   "validation and test windows never overlap)")
    p.add_argument("--max-windows-per-file", type=int, default=100, help="so no single large file dominates a split")
    p.add_argument("--vocab-size", type=int, default=16000, help="vocabulary entries at most, <pad> and <oov> included")
    p.add_argument("--min-count", type=int, default=2, help="training occurrences a word needs to get an id")
    p.add_argument("--valid-fraction", type=float, default=0.1)
    p.add_argument("--test-fraction", type=float, default=0.2)
    p.add_argument("--packages", help="only these top-level packages (comma-separated; default: every one)")
    p.add_argument("--writer", choices=("auto", "ebin", "jsonl"), default="auto",
                   help="enhanced.write_ebin, or JSON Lines + enhanced-data convert (auto: write_ebin where present)")
    p.add_argument("--exclude", default=",".join(DEFAULT_EXCLUDE), help="directories never used (comma-separated)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--app-dir", default=os.path.join(repo, "build", "release", "apps"), help="where enhanced-data is")
    args = p.parse_args(argv)
    if args.seq_len < 1 or args.min_files < 3 or args.max_files < args.min_files or args.max_windows_per_file < 1:
        p.error("need --seq-len >= 1, --min-files >= 3, --max-files >= --min-files, --max-windows-per-file >= 1")
    if not os.path.isdir(args.source):
        p.error(f"--source {args.source}: not a directory")
    args.train_stride = args.train_stride or max(1, args.seq_len // 2)
    sys.path.insert(0, os.path.join(repo, "python"))  # `import enhanced` from this checkout
    args.writer = resolve_writer(args.writer, args.app_dir)
    return args


def write_one_split(args, split, files, packages, ids, min_fill, rng, file_rows):
    """Cuts the split's files into windows, writes <split>.ebin and samples-<split>.tsv, appends
    the files' rows to file_rows and returns the split's summary."""
    encoded, labels, sample_rows = [], [], []
    stride = args.train_stride if split == "train" else args.seq_len
    for label, path, tokens in files:
        starts = window_starts(len(tokens), args.seq_len, stride, args.max_windows_per_file, min_fill, rng)
        encoded.append((encode_file(tokens, ids), starts))
        for start in starts:
            sample_rows.append(f"{len(labels)}\t{packages[label]}\t{path}\t{start}")
            labels.append(label)
        file_rows.append(f"{split}\t{packages[label]}\t{path}\t{len(tokens)}\t{len(starts)}")
    labels = np.array(labels, dtype=np.int32)
    words = [w for _, _, tokens in files for w, _ in tokens]
    oov = sum(1 for w in words if w not in ids) / max(1, len(words))
    route = write_split(os.path.join(args.out, f"{split}.ebin"), encode_windows(encoded, args.seq_len), labels,
                        args.writer, args.app_dir)
    write_lines(os.path.join(args.out, f"samples-{split}.tsv"), ["sample\tlabel\tfile\tfirst_token"] + sample_rows)
    counts = np.bincount(labels, minlength=len(packages)).tolist()
    return {"files": len(files), "samples": len(labels), "per_label": counts, "oov_rate": round(oov, 4),
            "chance": chance_levels(counts), "written_by": route}


def main(argv):
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    min_fill = max(1, args.seq_len // 4)
    only = set(args.packages.split(",")) if args.packages else None
    by_package = discover_files(args.source, only, set(args.exclude.split(",")), args.min_files, args.max_files,
                                min_fill, rng)
    if len(by_package) < 2:
        sys.exit(f"error: {args.source}: fewer than 2 packages with {args.min_files} files of {min_fill}+ tokens")
    packages = sorted(by_package)
    splits = split_files(by_package, args.valid_fraction, args.test_fraction, rng)
    vocab = build_vocab(splits["train"], args.vocab_size, args.min_count)
    ids = {word: i for i, word in enumerate(vocab)}
    os.makedirs(args.out, exist_ok=True)
    summary = {"source": args.source, "seq_len": args.seq_len, "seed": args.seed, "labels": packages,
               "vocab_size": len(vocab), "splits": {}}
    file_rows = []
    for split in SPLITS:
        summary["splits"][split] = write_one_split(args, split, splits[split], packages, ids, min_fill, rng, file_rows)
    write_lines(os.path.join(args.out, "vocab.txt"), vocab)
    write_lines(os.path.join(args.out, "labels.txt"), packages)
    write_lines(os.path.join(args.out, "files.tsv"), ["split\tlabel\tfile\ttokens\twindows"] + file_rows)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    print_summary(summary)


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(line + "\n" for line in lines)


def print_summary(summary):
    print(f"source {summary['source']}, T = {summary['seq_len']}, vocabulary {summary['vocab_size']} ids, "
          f"{len(summary['labels'])} labels")
    print(f"{'label':>16} " + " ".join(f"{s:>7}" for s in SPLITS))
    for i, name in enumerate(summary["labels"]):
        print(f"{name:>16} " + " ".join(f"{summary['splits'][s]['per_label'][i]:>7}" for s in SPLITS))
    for s in SPLITS:
        info = summary["splits"][s]
        print(f"{s}: {info['files']} files, {info['samples']} samples, OOV {100 * info['oov_rate']:.1f}% of tokens, "
              f"chance {100 * info['chance']['majority']:.1f}% (majority) / {100 * info['chance']['uniform']:.1f}% "
              f"(uniform), written by {info['written_by']}")


if __name__ == "__main__":
    main(sys.argv[1:])
