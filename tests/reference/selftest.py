#!/usr/bin/python3
"""Self-test of the PyTorch reference, independent of the C++ engine.

usage: selftest.py [--seed S] [--keep DIR] [--big]

Checks:
  1. safetensors_io: write/read round trip (F32/F64/I32/I64, shapes [0], [], [2,0,3]) and
     rejection of malformed files (bad offsets, overlaps, holes, truncation, bad JSON).
  2. the blend (both modes) against a naive per-position Python loop; the whole forward
     against a naive NumPy implementation of the contract's equations (docs/model.md) (gate order i,f,g,o,
     reverse direction, [fwd, rev] concatenation, pooling, dense); first-maximal-k gradient
     routing of the feature max-pool on an exact tie.
  3. random case directories (both blends, both pools, empty identifier lists, a batch with
     no identifier ids at all, B=1/T=1/H=1) whose expected values come from a float64 run of
     the model and of torch.optim SGD/Adam, stored as F32: parity.py (float32) must exit 0;
     with one gradient element perturbed by 1% it must exit 1 and name that tensor; with the
     checkpoint's blend mode switched it must exit 1; with a truncated file it must exit 2.
Exit status 0 when everything passes, 1 otherwise.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from model import Model, keras_init  # noqa: E402
from safetensors_io import (SafetensorsError, dumps, loads, read_safetensors,  # noqa: E402
                            write_safetensors)
import struct  # noqa: E402
import json  # noqa: E402

FAILURES = []


def check(cond, what):
    print(f"[{'ok' if cond else 'FAIL'}] {what}", flush=True)
    if not cond:
        FAILURES.append(what)
    return cond


# ---------------------------------------------------------------------------------------------
# 1. safetensors
# ---------------------------------------------------------------------------------------------
def test_safetensors(tmp):
    rng = np.random.default_rng(1)
    tensors = {
        "a.f32": rng.standard_normal((3, 4)).astype(np.float32),
        "b.f64": rng.standard_normal(5),
        "c.i32": rng.integers(-2**31, 2**31 - 1, size=(2, 3), dtype=np.int32),
        "d.i64": rng.integers(-2**62, 2**62, size=(7,), dtype=np.int64),
        "empty.f32": np.zeros((0,), np.float32),
        "empty.i32": np.zeros((0,), np.int32),
        "empty3d": np.zeros((2, 0, 3), np.float64),
        "scalar": np.array(3.5, np.float32),
        "big_endian_in": np.arange(4, dtype=">i4"),
    }
    md = {"vocab_size": "12", "blend": "scalar-mean", "note": "ünïcode"}
    path = os.path.join(tmp, "rt.safetensors")
    write_safetensors(path, tensors, md)
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    check((8 + n) % 8 == 0, "safetensors: data buffer starts 8-byte aligned")
    got, gmd = read_safetensors(path)
    ok = gmd == md and set(got) == set(tensors)
    for k, v in tensors.items():
        g = got.get(k)
        ok = ok and g is not None and g.shape == v.shape and np.array_equal(g, v) \
            and g.dtype == v.dtype.newbyteorder("=")
    check(ok, "safetensors: round trip of F32/F64/I32/I64, shapes [0], [2,0,3], [], metadata")
    # dtype tags and offsets as written
    header = json.loads(raw[8:8 + n])
    check(header["a.f32"]["dtype"] == "F32" and header["b.f64"]["dtype"] == "F64"
          and header["c.i32"]["dtype"] == "I32" and header["d.i64"]["dtype"] == "I64"
          and header["empty.f32"]["shape"] == [0]
          and header["empty.f32"]["data_offsets"][0] == header["empty.f32"]["data_offsets"][1],
          "safetensors: header dtype tags, zero-size offsets")
    # a file with only zero-element tensors and no metadata
    t0, m0 = loads(dumps({"x": np.zeros((0,), np.int32)}))
    check(t0["x"].shape == (0,) and m0 == {}, "safetensors: only an empty tensor, no metadata")

    def hand(header_obj, data=b"", pad=True):
        h = json.dumps(header_obj).encode()
        if pad:
            h += b" " * (-len(h) % 8)
        return struct.pack("<Q", len(h)) + h + data

    good = hand({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8)
    check(loads(good)[0]["x"].shape == (2,), "safetensors: hand-written file reads")
    bad = {
        "offsets past the end": hand({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4),
        "size/shape mismatch": hand({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8),
        "begin > end": hand({"x": {"dtype": "F32", "shape": [0], "data_offsets": [8, 4]}}, b"\0" * 8),
        "negative offset": hand({"x": {"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]}}, b"\0" * 4),
        "overlap": hand({"x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                         "y": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
        "hole": hand({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8),
        "trailing bytes": hand({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 8),
        "unknown dtype": hand({"x": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 4),
        "negative dim": hand({"x": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 0]}}),
        "non-string metadata": hand({"__metadata__": {"a": 1}}),
        "header length past EOF": struct.pack("<Q", 1000) + b"{}",
        "short file": b"\x01\x00",
        "bad JSON": struct.pack("<Q", 4) + b"{no}",
        "truncated": good[:-3],
    }
    for what, blob in bad.items():
        try:
            loads(blob)
            check(False, f"safetensors: rejects {what}")
        except SafetensorsError:
            check(True, f"safetensors: rejects {what}")


# ---------------------------------------------------------------------------------------------
# 2. naive implementations
# ---------------------------------------------------------------------------------------------
def random_batch(rng, V, B, T, L, max_ids=4, p_empty=0.3, no_ids=False):
    counts = rng.integers(1, max_ids + 1, size=B * T)
    counts[rng.random(B * T) < p_empty] = 0
    if no_ids:
        counts[:] = 0
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    ids = rng.integers(0, V, size=int(offsets[-1])).astype(np.int32)
    cur = rng.integers(0, V, size=B * T).astype(np.int32)
    labels = rng.integers(0, L, size=B).astype(np.int32)
    return offsets, ids, cur, labels


def naive_blend(E, offsets, ids, cur, B, T, mode):
    D = E.shape[1]
    x = np.zeros((B, T, D))
    for b in range(B):
        for t in range(T):
            p = b * T + t
            sub = [int(i) for i in ids[offsets[p]:offsets[p + 1]]]
            ec = E[cur[p]]
            if not sub:
                x[b, t] = ec
                continue
            rows = np.array([E[i] for i in sub])                 # (n, D)
            if mode == "mean":
                m = np.array([sum(rows[j, d] for j in range(len(sub))) / len(sub) for d in range(D)])
            else:
                m = sum(float(v) for v in rows.ravel()) / (len(sub) * D)   # one scalar
            x[b, t] = 0.5 * m + 0.5 * ec
    return x


def naive_forward(sd, x, H, pool):
    def sig(z):
        return 1.0 / (1.0 + np.exp(-z))

    B, T, _ = x.shape
    y = np.zeros((B, T, 2 * H))
    for d, sfx, order in ((0, "", range(T)), (1, "_reverse", range(T - 1, -1, -1))):
        Wi, Wh = sd["lstm.weight_ih_l0" + sfx], sd["lstm.weight_hh_l0" + sfx]
        bi, bh = sd["lstm.bias_ih_l0" + sfx], sd["lstm.bias_hh_l0" + sfx]
        for b in range(B):
            h = np.zeros(H)
            c = np.zeros(H)
            for t in order:
                z = Wi @ x[b, t] + bi + Wh @ h + bh
                i, f, g, o = sig(z[:H]), sig(z[H:2 * H]), np.tanh(z[2 * H:3 * H]), sig(z[3 * H:])
                c = f * c + i * g
                h = o * np.tanh(c)
                y[b, t, d * H:(d + 1) * H] = h
    p = y.max(axis=2) if pool == "feature" else y.max(axis=1)
    return p @ sd["dense.weight"].T + sd["dense.bias"]


def randomise(model, gen, emb_scale=1.0):
    keras_init(model, gen)
    with torch.no_grad():
        model.embedding.weight.mul_(emb_scale)
        for n, p in model.named_parameters():
            if "bias" in n:
                p.add_(0.1 * torch.randn(p.shape, generator=gen, dtype=torch.float64).to(p.dtype))
    return model


def test_naive():
    rng = np.random.default_rng(2)
    gen = torch.Generator().manual_seed(2)
    for blend in ("mean", "scalar-mean"):
        for pool in ("feature", "time"):
            V, D, H, T, L, B = 13, 5, 3, 6, 4, 3
            m = randomise(Model(V, D, H, T, L, blend, pool, dtype=torch.float64), gen, 10.0)
            off, ids, cur, _ = random_batch(rng, V, B, T, L)
            E = m.embedding.weight.detach().numpy()
            with torch.no_grad():
                xb = m.blend(torch.from_numpy(off), torch.from_numpy(ids), torch.from_numpy(cur), B, T).numpy()
                lg = m(torch.from_numpy(off), torch.from_numpy(ids), torch.from_numpy(cur), B, T).numpy()
            xn = naive_blend(E, off, ids, cur, B, T, blend)
            check(np.abs(xb - xn).max() < 1e-12 and (np.diff(off) == 0).any() and (np.diff(off) > 1).any(),
                  f"blend {blend}: vectorised == naive loop (with empty lists), max diff {np.abs(xb - xn).max():.1e}")
            sd = {k: v.detach().numpy() for k, v in m.state_dict().items()}
            ln = naive_forward(sd, xn, H, pool)
            check(np.abs(lg - ln).max() < 1e-10,
                  f"forward {blend}/{pool}: torch == naive equations of docs/model.md, max diff {np.abs(lg - ln).max():.1e}")
    # scalar-mean differs from mean when identifier rows differ per dimension
    m1 = randomise(Model(9, 4, 2, 3, 2, "mean", dtype=torch.float64), gen)
    m2 = Model(9, 4, 2, 3, 2, "scalar-mean", dtype=torch.float64)
    m2.load_state_dict(m1.state_dict())
    off = torch.tensor([0, 2, 2, 3]); ids = torch.tensor([1, 2, 5]); cur = torch.tensor([0, 3, 4])
    with torch.no_grad():
        x1, x2 = m1.blend(off, ids, cur, 1, 3), m2.blend(off, ids, cur, 1, 3)
    check(torch.equal(x1[0, 1], x2[0, 1]) and not torch.allclose(x1[0, 0], x2[0, 0]),
          "blend modes agree on an empty list, differ otherwise")
    # tie in the feature max-pool: T=1 and identical directions give y[..., k] == y[..., H+k];
    # the gradient must go to the first maximal k, i.e. the forward direction only.
    m = randomise(Model(7, 3, 2, 1, 3, "mean", "feature", dtype=torch.float64), gen, 10.0)
    with torch.no_grad():
        for n in ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"):
            getattr(m.lstm, n + "_reverse").copy_(getattr(m.lstm, n))
    off, ids, cur = torch.tensor([0, 2, 3]), torch.tensor([1, 4, 6]), torch.tensor([2, 5])
    y, _ = m.lstm(m.blend(off, ids, cur, 2, 1))
    tie = torch.equal(y[..., :2], y[..., 2:])
    if check(tie, "tie construction: forward and reverse outputs bitwise equal"):
        loss = m.loss(m(off, ids, cur, 2, 1), torch.tensor([0, 2]))
        loss.backward()
        check(m.lstm.weight_ih_l0.grad.abs().max() > 0 and m.lstm.weight_ih_l0_reverse.grad.abs().max() == 0,
              "feature max-pool tie: gradient goes to the first maximal k (forward direction)")


# ---------------------------------------------------------------------------------------------
# 3. case directories
# ---------------------------------------------------------------------------------------------
def make_case(case_dir, seed, V, D, H, T, L, B, blend, pool, no_ids=False, p_empty=0.3):
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    os.makedirs(case_dir, exist_ok=True)
    m32 = randomise(Model(V, D, H, T, L, blend, pool, dtype=torch.float32), gen,
                    emb_scale=float(rng.choice([1.0, 10.0])))
    ckpt = {k: v.detach().numpy().astype(np.float32) for k, v in m32.state_dict().items()}
    write_safetensors(os.path.join(case_dir, "checkpoint.safetensors"), ckpt, m32.metadata())
    off, ids, cur, labels = random_batch(rng, V, B, T, L, p_empty=p_empty, no_ids=no_ids)
    write_safetensors(os.path.join(case_dir, "batch.safetensors"),
                      {"identifier_offsets": off, "identifier_ids": ids, "cur_word_ids": cur, "labels": labels},
                      {"batch_size": str(B), "seq_len": str(T)})
    hp = {"sgd_lr": float(rng.choice([0.05, 0.3])), "sgd_momentum": float(rng.choice([0.0, 0.9])),
          "sgd_steps": int(rng.integers(1, 4)), "adam_lr": float(rng.choice([1e-3, 1e-2])),
          "adam_beta1": 0.9, "adam_beta2": 0.999, "adam_eps": 1e-7, "adam_steps": int(rng.integers(1, 4))}
    batch = (torch.from_numpy(off), torch.from_numpy(ids), torch.from_numpy(cur))
    lab = torch.from_numpy(labels)

    def fresh():
        m = Model(V, D, H, T, L, blend, pool, dtype=torch.float64)
        m.load_state_dict({k: torch.from_numpy(v.astype(np.float64)) for k, v in ckpt.items()})
        return m

    exp = {}
    m = fresh()
    logits = m(*batch, B, T)
    loss = m.loss(logits, lab)
    loss.backward()
    exp["loss"] = loss.detach().numpy().reshape(1)
    exp["logits"] = logits.detach().numpy()
    for n, p in m.named_parameters():
        exp["grad." + n] = p.grad.numpy()
    for tag, steps, make in (
            ("sgd", hp["sgd_steps"], lambda ps: torch.optim.SGD(ps, lr=hp["sgd_lr"], momentum=hp["sgd_momentum"])),
            ("adam", hp["adam_steps"], lambda ps: torch.optim.Adam(
                ps, lr=hp["adam_lr"], betas=(hp["adam_beta1"], hp["adam_beta2"]), eps=hp["adam_eps"]))):
        m = fresh()
        opt = make(m.parameters())
        for _ in range(steps):
            opt.zero_grad()
            m.loss(m(*batch, B, T), lab).backward()
            opt.step()
        for n, p in m.named_parameters():
            exp[f"{tag}.{n}"] = p.detach().numpy()
    exp = {k: np.asarray(v, dtype=np.float32) for k, v in exp.items()}
    write_safetensors(os.path.join(case_dir, "expected.safetensors"), exp,
                      {k: repr(v) for k, v in hp.items()})
    return exp


def parity(*case_dirs, extra=()):
    cmd = [sys.executable, os.path.join(HERE, "parity.py"), *extra, *case_dirs]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def test_cases(tmp, seed, big):
    configs = [
        # name, V, D, H, T, L, B, blend, pool, extra
        ("mean_feature", 40, 8, 4, 7, 3, 4, "mean", "feature", {}),
        ("scalar_time", 40, 8, 4, 7, 3, 4, "scalar-mean", "time", {}),
        ("mean_time", 30, 6, 5, 9, 4, 3, "mean", "time", {"p_empty": 0.6}),
        ("scalar_feature", 30, 6, 5, 9, 4, 3, "scalar-mean", "feature", {"p_empty": 0.6}),
        ("tiny_B1T1H1_mean_feature", 5, 3, 1, 1, 2, 1, "mean", "feature", {}),
        ("tiny_B1T1H1_scalar_time", 5, 3, 1, 1, 2, 1, "scalar-mean", "time", {}),
        ("no_ids_B1T1H1_feature", 5, 3, 1, 1, 2, 1, "mean", "feature", {"no_ids": True}),
        ("no_ids_scalar_time", 20, 4, 2, 5, 3, 2, "scalar-mean", "time", {"no_ids": True}),
    ]
    if big:
        configs.append(("seed_shape_T400", 200, 32, 16, 400, 5, 4, "mean", "feature", {}))
    dirs = []
    for i, (name, V, D, H, T, L, B, blend, pool, kw) in enumerate(configs):
        d = os.path.join(tmp, name)
        make_case(d, seed * 100 + i, V, D, H, T, L, B, blend, pool, **kw)
        dirs.append(d)
    b6, _ = read_safetensors(os.path.join(dirs[6], "batch.safetensors"))
    check(b6["identifier_ids"].shape == (0,), "a case with zero identifier ids (I32 shape [0]) was written")

    rc, out = parity(*dirs)
    print(out.rstrip().splitlines()[-1])
    if not check(rc == 0, f"parity.py accepts {len(dirs)} float64-derived cases (rc={rc})"):
        print(out)
    worst = max((float(line.split("rel=")[1].split()[0]) for line in out.splitlines() if "rel=" in line
                 and not line.split("rel=")[1].startswith("-")), default=float("nan"))
    print(f"      worst relative error float32 torch vs float64-derived expected: {worst:.2e}")

    # perturb one gradient element by 1 %
    src = dirs[0]
    bad = os.path.join(tmp, "perturbed_grad")
    shutil.copytree(src, bad)
    exp, emd = read_safetensors(os.path.join(bad, "expected.safetensors"))
    key = "grad.lstm.weight_hh_l0"
    k = int(np.argmax(np.abs(exp[key])))
    exp[key].flat[k] *= 1.01
    write_safetensors(os.path.join(bad, "expected.safetensors"), exp, emd)
    rc, out = parity(bad)
    fails = [line for line in out.splitlines() if line.rstrip().endswith("FAIL")]
    check(rc == 1 and len(fails) == 1 and "lstm.weight_hh_l0 " in fails[0] and "grad" in fails[0],
          f"parity.py fails (rc={rc}) on exactly the gradient perturbed by 1%: {fails}")

    # switching the blend mode in the checkpoint must be detected
    sw = os.path.join(tmp, "switched_blend")
    shutil.copytree(src, sw)
    ck, cmd = read_safetensors(os.path.join(sw, "checkpoint.safetensors"))
    cmd["blend"] = "scalar-mean"
    write_safetensors(os.path.join(sw, "checkpoint.safetensors"), ck, cmd)
    rc, out = parity(sw)
    check(rc == 1, f"parity.py fails (rc={rc}) when the checkpoint's blend mode is switched")

    # unreadable input -> 2
    tr = os.path.join(tmp, "truncated")
    shutil.copytree(src, tr)
    p = os.path.join(tr, "expected.safetensors")
    blob = open(p, "rb").read()
    open(p, "wb").write(blob[:-5])
    rc, out = parity(tr)
    check(rc == 2 and "UNREADABLE" in out, f"parity.py exits 2 on a truncated file (rc={rc})")
    rc, out = parity(os.path.join(tmp, "does_not_exist"))
    check(rc == 2, f"parity.py exits 2 on a missing case directory (rc={rc})")
    # a looser tolerance accepts the perturbation
    rc, _ = parity(bad, extra=("--rtol", "0.02"))
    check(rc == 0, f"--rtol 0.02 accepts the 1% perturbation (rc={rc})")
    test_optional_options(tmp, src)


def with_options(tmp, src, name, metadata=None, tensors=None):
    """A copy of case `src` whose expected.safetensors gains the given metadata and tensors."""
    d = os.path.join(tmp, name)
    shutil.copytree(src, d)
    exp, emd = read_safetensors(os.path.join(d, "expected.safetensors"))
    emd.update(metadata or {})
    exp.update(tensors or {})
    write_safetensors(os.path.join(d, "expected.safetensors"), exp, emd)
    return d


def failing(out):
    return {line.split()[1] for line in out.splitlines() if line.rstrip().endswith("FAIL")}


def test_optional_options(tmp, src):
    """The training controls' options reach torch: each one changes exactly what it should."""
    _, emd = read_safetensors(os.path.join(src, "expected.safetensors"))
    _, cmd = read_safetensors(os.path.join(src, "checkpoint.safetensors"))
    L = int(cmd["num_labels"])
    # the constant rate given step by step is the plain case
    same = {"sgd_lrs": ",".join([emd["sgd_lr"]] * int(emd["sgd_steps"])),
            "adam_lrs": ",".join([emd["adam_lr"]] * int(emd["adam_steps"]))}
    rc, out = parity(with_options(tmp, src, "constant_lrs", same))
    check(rc == 0, f"per-step rates equal to the constant rate give the plain case (rc={rc})")
    rates = {"adam_lrs": ",".join(["0.05"] * int(emd["adam_steps"]))}
    rc, out = parity(with_options(tmp, src, "other_lrs", rates))
    check(rc == 1 and failing(out) == {"adam"}, f"other per-step Adam rates fail the Adam tensors only: {failing(out)}")
    rc, out = parity(with_options(tmp, src, "sgd_decay", {"sgd_weight_decay": "0.5"}))
    check(rc == 1 and failing(out) == {"sgd"}, f"SGD weight decay fails the SGD tensors only: {failing(out)}")
    rc, out = parity(with_options(tmp, src, "adamw", {"adam_weight_decay": "0.5", "weight_decay_embedding": "1"}))
    check(rc == 1 and failing(out) == {"adam"}, f"AdamW fails the Adam tensors only: {failing(out)}")
    weights = {"class_weights": np.linspace(0.0, 2.0, L).astype(np.float32)}
    rc, out = parity(with_options(tmp, src, "weighted", tensors=weights))
    check(rc == 1 and "forward" in failing(out), f"class weights change the loss: {failing(out)}")
    rc, out = parity(with_options(tmp, src, "ones", tensors={"class_weights": np.full(L, 3.0, np.float32)}))
    check(rc == 0, f"equal class weights give the plain case (rc={rc})")
    rc, out = parity(with_options(tmp, src, "short_lrs", {"sgd_lrs": "0.1," * 7 + "0.1"}))
    check(rc == 2 and "UNREADABLE" in out, f"a rate list of the wrong length is unreadable (rc={rc})")


def main():
    ap = argparse.ArgumentParser(description="self-test of the PyTorch reference")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--keep", metavar="DIR", help="write the case directories here and keep them")
    ap.add_argument("--big", action="store_true", help="also a T=400, D=32 case (slower)")
    args = ap.parse_args()
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    tmp = args.keep or tempfile.mkdtemp(prefix="enhanced_ref_selftest_")
    os.makedirs(tmp, exist_ok=True)
    try:
        test_safetensors(tmp)
        test_naive()
        test_cases(tmp, args.seed, args.big)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"selftest: {'FAILED: ' + str(len(FAILURES)) + ' check(s)' if FAILURES else 'all checks passed'}")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
