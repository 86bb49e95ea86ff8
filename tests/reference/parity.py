#!/usr/bin/python3
"""Compare the C++ engine against the PyTorch reference on case directories.

usage: parity.py [--rtol R] [--threads N] [--seed S] [--dtype float32|float64] CASE_DIR [CASE_DIR ...]

Each CASE_DIR holds checkpoint.safetensors, batch.safetensors and expected.safetensors
(format: tests/reference/README.md). For every case: forward/backward (loss, logits, every
gradient), then `sgd_steps` steps of torch.optim.SGD(momentum, weight_decay) and `adam_steps`
steps of torch.optim.Adam (torch.optim.AdamW when the case gives `adam_weight_decay`) from the
checkpoint on the same batch (every parameter compared). Optional: a `class_weights` tensor
(CrossEntropyLoss(weight=)), per-step learning rates (`sgd_lrs`, `adam_lrs`: set through
param_group['lr'] before each step), `weight_decay_embedding`.
Per tensor: rel = max|engine - torch| / max(max|torch|, 1e-12); ok if rel <= rtol.
Exit status: 0 all ok, 1 some tensor failed (or was missing / misshapen), 2 unreadable input.
"""
import argparse
import math
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Model, BLENDS, POOLS  # noqa: E402
from safetensors_io import read_safetensors, SafetensorsError  # noqa: E402

MODEL_KEYS = ("vocab_size", "embedding_dim", "hidden", "seq_len", "num_labels", "blend", "pool")
OPT_KEYS = ("sgd_lr", "sgd_momentum", "sgd_steps",
            "adam_lr", "adam_beta1", "adam_beta2", "adam_eps", "adam_steps")
# Optional keys (absent: no weight decay, the embedding excluded from it, a constant rate).
OPTIONAL_FLOAT_KEYS = ("sgd_weight_decay", "adam_weight_decay")
KNOWN_TENSORS = ("loss", "logits", "class_weights")


class CaseError(Exception):
    """The case directory cannot be read or is inconsistent (exit status 2)."""


def _read(case_dir, fname):
    path = os.path.join(case_dir, fname)
    try:
        return read_safetensors(path)
    except (OSError, SafetensorsError) as e:
        raise CaseError(f"{path}: {e}") from None


def _num(md, key, conv, where):
    if key not in md:
        raise CaseError(f"{where}: metadata key {key!r} missing")
    try:
        v = conv(md[key])
    except ValueError:
        raise CaseError(f"{where}: metadata {key}={md[key]!r} is not a valid {conv.__name__}") from None
    if conv is float and not math.isfinite(v):
        raise CaseError(f"{where}: metadata {key}={md[key]!r} is not finite")
    return v


def load_case(case_dir):
    ckpt, cmd = _read(case_dir, "checkpoint.safetensors")
    batch, bmd = _read(case_dir, "batch.safetensors")
    expected, emd = _read(case_dir, "expected.safetensors")

    for k in MODEL_KEYS:
        if k not in cmd:
            raise CaseError(f"{case_dir}: checkpoint metadata key {k!r} missing")
    cfg = {k: _num(cmd, k, int, "checkpoint") for k in MODEL_KEYS[:5]}
    if cmd["blend"] not in BLENDS or cmd["pool"] not in POOLS:
        raise CaseError(f"{case_dir}: checkpoint blend={cmd['blend']!r} pool={cmd['pool']!r} "
                        f"(want one of {BLENDS} / {POOLS})")
    if min(cfg.values()) < 1:
        raise CaseError(f"{case_dir}: checkpoint sizes must be >= 1: {cfg}")

    B = _num(bmd, "batch_size", int, "batch")
    T = _num(bmd, "seq_len", int, "batch")
    if T != cfg["seq_len"]:
        raise CaseError(f"{case_dir}: batch seq_len {T} != checkpoint seq_len {cfg['seq_len']}")
    for k in ("identifier_offsets", "identifier_ids", "cur_word_ids", "labels"):
        if k not in batch:
            raise CaseError(f"{case_dir}: batch tensor {k!r} missing")
        if batch[k].dtype.kind not in "iu" or batch[k].ndim != 1:
            raise CaseError(f"{case_dir}: batch tensor {k!r} must be 1-D integer, "
                            f"got {batch[k].dtype} {list(batch[k].shape)}")
    off = batch["identifier_offsets"].astype(np.int64)
    ids = batch["identifier_ids"].astype(np.int64)
    cur = batch["cur_word_ids"].astype(np.int64)
    labels = batch["labels"].astype(np.int64)
    V, L = cfg["vocab_size"], cfg["num_labels"]
    problems = []
    if B < 1:
        problems.append(f"batch_size {B} < 1")
    if off.size != B * T + 1:
        problems.append(f"identifier_offsets has {off.size} entries, want B*T+1 = {B * T + 1}")
    elif off[0] != 0 or np.any(np.diff(off) < 0) or off[-1] != ids.size:
        problems.append(f"identifier_offsets must start at 0, not decrease, end at n = {ids.size}")
    if cur.size != B * T:
        problems.append(f"cur_word_ids has {cur.size} entries, want B*T = {B * T}")
    if labels.size != B:
        problems.append(f"labels has {labels.size} entries, want B = {B}")
    for name, a, hi in (("identifier_ids", ids, V), ("cur_word_ids", cur, V), ("labels", labels, L)):
        if a.size and (a.min() < 0 or a.max() >= hi):
            problems.append(f"{name} outside [0, {hi})")
    if problems:
        raise CaseError(f"{case_dir}: batch: " + "; ".join(problems))

    opt = {k: _num(emd, k, int if k.endswith("_steps") else float, "expected") for k in OPT_KEYS}
    if opt["sgd_steps"] < 0 or opt["adam_steps"] < 0:
        raise CaseError(f"{case_dir}: negative step count")
    opt.update(_optional_options(emd, opt, case_dir))
    class_weights = _class_weights(expected, L, case_dir)
    return {"ckpt": ckpt, "cmd": cmd, "B": B, "T": T,
            "batch": (torch.from_numpy(off), torch.from_numpy(ids), torch.from_numpy(cur)),
            "labels": torch.from_numpy(labels), "class_weights": class_weights, "expected": expected, "opt": opt}


def _optional_options(emd, opt, case_dir):
    """Weight decay (None: absent), whether the embedding decays, per-step rates (None: constant)."""
    out = {}
    for k in OPTIONAL_FLOAT_KEYS:
        out[k] = _num(emd, k, float, "expected") if k in emd else None
        if out[k] is not None and out[k] < 0:
            raise CaseError(f"{case_dir}: expected metadata {k}={emd[k]!r} is negative")
    if emd.get("weight_decay_embedding", "0") not in ("0", "1"):
        raise CaseError(f"{case_dir}: expected metadata weight_decay_embedding must be 0 or 1")
    out["weight_decay_embedding"] = emd.get("weight_decay_embedding", "0") == "1"
    for tag in ("sgd", "adam"):
        out[f"{tag}_lrs"] = _rates(emd, f"{tag}_lrs", opt[f"{tag}_steps"], case_dir)
    return out


def _class_weights(expected, L, case_dir):
    """The optional class_weights tensor (L non-negative finite numbers) as a float64 tensor, or None."""
    if "class_weights" not in expected:
        return None
    w = expected["class_weights"].astype(np.float64)
    if w.shape != (L,) or not np.all(np.isfinite(w)) or np.any(w < 0):
        raise CaseError(f"{case_dir}: class_weights must be {L} non-negative finite numbers, got shape {list(w.shape)}")
    return torch.from_numpy(w)


def _rates(md, key, steps, case_dir):
    """The per-step learning rates of `key` ("lr1,lr2,..."), one per step; None when absent."""
    if key not in md:
        return None
    try:
        rates = [float(x) for x in md[key].split(",")]
    except ValueError:
        raise CaseError(f"{case_dir}: expected metadata {key}={md[key]!r} is not a comma-separated list of floats") \
            from None
    if len(rates) != steps or not all(math.isfinite(r) and r >= 0 for r in rates):
        raise CaseError(f"{case_dir}: expected metadata {key} needs {steps} finite rates >= 0, got {md[key]!r}")
    return rates


def build(case, dtype):
    model = Model.from_metadata(case["cmd"], dtype=dtype)
    names = [n for n, _ in model.named_parameters()]
    missing = [n for n in names if n not in case["ckpt"]]
    extra = [n for n in case["ckpt"] if n not in names]
    if missing or extra:
        raise CaseError(f"checkpoint: missing tensors {missing}, unexpected tensors {extra}")
    state = {}
    for n, p in model.named_parameters():
        a = case["ckpt"][n]
        if tuple(a.shape) != tuple(p.shape):
            raise CaseError(f"checkpoint: {n} has shape {list(a.shape)}, the metadata implies {list(p.shape)}")
        if a.dtype.kind != "f":
            raise CaseError(f"checkpoint: {n} has dtype {a.dtype}, want float")
        state[n] = torch.from_numpy(a.astype(np.float64))
    model.load_state_dict(state, strict=True)  # copy_ casts to the model dtype
    return model


def loss_of(model, case):
    logits = model(*case["batch"], case["B"], case["T"])
    return model.loss(logits, case["labels"], case["class_weights"]), logits


def param_groups(model, weight_decay, decay_embedding):
    """Every parameter at weight_decay, the embedding at 0 unless decay_embedding (the engine's rule)."""
    embedding = [p for n, p in model.named_parameters() if n == "embedding.weight"]
    rest = [p for n, p in model.named_parameters() if n != "embedding.weight"]
    return [{"params": embedding, "weight_decay": weight_decay if decay_embedding else 0.0},
            {"params": rest, "weight_decay": weight_decay}]


def make_sgd(model, o):
    """torch.optim.SGD(momentum, weight_decay), the embedding's decay by the case's rule."""
    groups = param_groups(model, o["sgd_weight_decay"] or 0.0, o["weight_decay_embedding"])
    return torch.optim.SGD(groups, lr=o["sgd_lr"], momentum=o["sgd_momentum"])


def make_adam(model, o):
    """torch.optim.Adam, or torch.optim.AdamW when the case gives adam_weight_decay."""
    betas = (o["adam_beta1"], o["adam_beta2"])
    if o["adam_weight_decay"] is None:
        return torch.optim.Adam(model.parameters(), lr=o["adam_lr"], betas=betas, eps=o["adam_eps"])
    groups = param_groups(model, o["adam_weight_decay"], o["weight_decay_embedding"])
    return torch.optim.AdamW(groups, lr=o["adam_lr"], betas=betas, eps=o["adam_eps"])


def rel_error(engine, ref):
    """None when shapes differ; else max|engine-ref| / max(max|ref|, 1e-12) (nan if non-finite)."""
    engine = np.asarray(engine, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if engine.shape != ref.shape:
        return None
    if ref.size == 0:
        return 0.0
    diff = np.abs(engine - ref)
    if not np.all(np.isfinite(diff)):
        return float("nan")
    return float(diff.max() / max(float(np.abs(ref).max()), 1e-12))


def run_case(case_dir, rtol, dtype):
    """Returns [(what, name, rel or None, ok, note)]."""
    case = load_case(case_dir)
    exp = case["expected"]
    out = []

    def compare(what, key, name, ref):
        if key not in exp:
            out.append((what, name, None, False, "missing in expected.safetensors"))
            return
        rel = rel_error(exp[key], ref)
        if rel is None:
            out.append((what, name, None, False,
                        f"shape {list(exp[key].shape)} != reference {list(ref.shape)}"))
        else:
            out.append((what, name, rel, rel <= rtol, ""))

    def torch_np(t):
        return t.detach().to(torch.float64).numpy()

    # forward / backward
    model = build(case, dtype)
    names = [n for n, _ in model.named_parameters()]
    loss, logits = loss_of(model, case)
    loss.backward()
    compare("forward", "loss", "loss", torch_np(loss).reshape(1))
    compare("forward", "logits", "logits", torch_np(logits))
    for n, p in model.named_parameters():
        compare("grad", "grad." + n, n, torch_np(p.grad))

    o = case["opt"]
    optimisers = (("sgd", o["sgd_steps"], o["sgd_lrs"], make_sgd), ("adam", o["adam_steps"], o["adam_lrs"], make_adam))
    for tag, steps, rates, make in optimisers:
        model = build(case, dtype)
        opt = make(model, o)
        for step in range(steps):
            if rates is not None:  # a schedule: this step's rate, as torch's LR schedulers set it
                for group in opt.param_groups:
                    group["lr"] = rates[step]
            opt.zero_grad(set_to_none=False)
            loss, _ = loss_of(model, case)
            loss.backward()
            opt.step()
        for n, p in model.named_parameters():
            compare(tag, f"{tag}.{n}", n, torch_np(p))
    extra = sorted(k for k in exp if k not in KNOWN_TENSORS and
                   not any(k == f"{pre}.{n}" for pre in ("grad", "sgd", "adam") for n in names))
    if extra:
        out.append(("note", ",".join(extra), 0.0, True, "ignored: not part of the contract"))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cases", nargs="+", metavar="CASE_DIR")
    ap.add_argument("--rtol", type=float, default=1e-4,
                    help="max allowed max|engine-torch| / max|torch| per tensor (default 1e-4)")
    ap.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    ap.add_argument("--seed", type=int, default=0, help="torch.manual_seed (default 0)")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                    help="dtype of the reference run (default float32, like the engine)")
    args = ap.parse_args(argv)
    torch.manual_seed(args.seed)
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)

    n_ok = n_fail = 0
    unreadable = []
    for case_dir in args.cases:
        label = os.path.basename(os.path.normpath(case_dir)) or case_dir
        try:
            rows = run_case(case_dir, args.rtol, dtype)
        except CaseError as e:
            print(f"{label}  UNREADABLE  {e}", flush=True)
            unreadable.append(case_dir)
            continue
        for what, name, rel, ok, note in rows:
            if what == "note":
                print(f"{label}  note  {name}  {note}")
                continue
            rel_s = "-" if rel is None else f"{rel:.3e}"
            print(f"{label}  {what:<7}  {name:<28}  rel={rel_s:<10}  {'ok' if ok else 'FAIL'}"
                  + (f"  ({note})" if note else ""))
            n_ok += ok
            n_fail += not ok
        sys.stdout.flush()
    print(f"summary: {len(args.cases)} case(s), {n_ok + n_fail} tensors compared, {n_ok} ok, "
          f"{n_fail} FAIL, {len(unreadable)} unreadable case(s), rtol={args.rtol:g}")
    if unreadable:
        return 2
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
