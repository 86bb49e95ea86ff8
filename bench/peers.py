"""Side-by-side benchmark: enhanced-bench against PyTorch and TensorFlow on the same shapes, the
same data (the engine's dumped case) and the same thread counts. Each peer first computes the
loss of the same weights on the same batch, which must match the engine's to 1e-4.

usage: peers.py --bench BUILD/apps/enhanced-bench --tf-python .venv-bench/bin/python --out DIR
                [-B 64 -T 400 -D 32 -H 128 -V 50000 -L 104] [--repeats 5] [--threads 1,2]
                [--original-batch 2] [--sweep] [--plots DIR] [--precision fp32|bf16]

--precision bf16: the engine's --precision bf16 (bf16-emulated, at FP32 speed and said so, where
the engine refuses bf16 on this CPU) against PyTorch under torch.autocast(dtype=torch.bfloat16)
and Keras' mixed_bfloat16 policy; the losses must then agree within BF16_LOSS_TOLERANCE. Beside
them, as yardsticks and not peers: the engine's FP32 step and, where it chose AMX, the engine on
its AVX512-BF16 kernels (ENHANCED_BF16_KERNEL=avx512-bf16)."""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEBIAN_PYTHON = "/usr/bin/python3"  # Debian's python3-torch, the fallback
BF16_UNIT_ROUNDOFF = 2.0 ** -8


def bf16_loss_tolerance(engine_run):
    """Relative tolerance between two bf16 losses of the same weights and batch. Each side's logits
    err by up to ~6u times the largest logit (u = 2^-8; tests/test_precision.cpp's bound), so the
    two by 12u times it; the mean cross-entropy moves by at most twice the largest logit change."""
    return 2 * 12 * BF16_UNIT_ROUNDOFF * engine_run["initial_max_abs_logit"] / abs(engine_run["initial_loss"])


def command_path(name):
    """The peers run from bench/, so a relative path must not change meaning: a bare command name
    (`python3`) as the shell finds it on PATH, any other path made absolute."""
    if os.sep in name:
        return os.path.abspath(name)
    found = shutil.which(name)
    if found is None:
        sys.exit(f"peers.py: {name}: no such command on PATH")
    return os.path.abspath(found)  # PATH may hold a relative folder


def run_json(command, env=None, refusal=None):
    """The command's one JSON result; with refusal, None where it fails saying that (an engine's
    one-line refusal of a setting this CPU cannot run)."""
    result = subprocess.run(command, capture_output=True, text=True, cwd=HERE,
                            env=dict(os.environ, **env) if env else None)
    if result.returncode != 0:
        if refusal and refusal in result.stderr:
            return None
        sys.exit(f"peers.py: {' '.join(command)} failed:\n{result.stderr[-2000:]}")
    try:
        return json.loads(result.stdout)
    except json.JSONDecodeError:  # a peer may print log lines before its one JSON line
        return json.loads(result.stdout.strip().splitlines()[-1])


def engine(args, shapes, case_dir=None, blend="mean", repeats=None, loader=False, extra=(), env=None, refusal=None):
    command = [args.bench, "--json", "--device", args.device, "--repeats", str(repeats or args.repeats), "--warmup", "2",
               "--blend", blend,
               "-B", str(shapes["B"]), "-T", str(shapes["T"]), "-D", str(shapes["D"]), "-H", str(shapes["H"]),
               "-V", str(shapes["V"]), "-L", str(shapes["L"])]
    if case_dir:
        command += ["--dump-case", case_dir]
    if not loader:
        command.append("--no-loader")
    return run_json(command + list(extra), env=env, refusal=refusal)


def peer(python, script, case_dir, threads, repeats, extra=(), refusal=None):
    return run_json([python, os.path.join(HERE, script), case_dir, "--threads", str(threads), "--repeats", str(repeats),
                     *extra], refusal=refusal)


# PyTorch's CPU LSTM in bf16 is oneDNN's, which has no bf16 primitive on a CPU without AVX-512
# (seen on an AVX2-only AMD EPYC Zen 3): that peer then has no bf16 row, said so, not a failure.
TORCH_BF16_REFUSAL = "could not create a primitive descriptor for the LSTM"


def check_loss(name, peer_loss, engine_loss, tolerance=1e-4):
    error = abs(peer_loss - engine_loss) / max(abs(engine_loss), 1e-12)
    if error > tolerance:
        sys.exit(f"peers.py: {name} computes loss {peer_loss}, the engine {engine_loss} (relative error {error:.2e}): "
                 "not the same function, no timing reported")
    return error


def best_of_threads(runs):
    """The faster thread setting counts, per figure."""
    best = {}
    for run in runs:
        for figure, t in run["times"].items():
            if figure not in best or t["median_s"] < best[figure]["median_s"]:
                best[figure] = dict(t, threads=run["threads"])
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--bench", required=True)
    p.add_argument("--tf-python", default=None, help="Python with tensorflow-cpu (the bench venv); omit to skip TF")
    p.add_argument("--torch-python", default=None,
                   help="Python with torch (default: the bench venv's, with PyPI's newest torch, else Debian's)")
    p.add_argument("--out", required=True)
    for flag, default in (("-B", 64), ("-T", 400), ("-D", 32), ("-H", 128), ("-V", 50000), ("-L", 104)):
        p.add_argument(flag, type=int, default=default)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--original-batch", type=int, default=2)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                   help="cuda: the engine on the GPU against PyTorch on the GPU, eager and compiled (CUDA graphs)")
    p.add_argument("--sweep", action="store_true", help="also time engine and fastest peer against T and B, and plot")
    p.add_argument("--plots", default=None, help="directory for the sweep PNGs")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="bf16: the engine's --precision bf16 against the peers' own bfloat16 settings")
    args = p.parse_args()
    if args.sweep and args.precision != "fp32":
        p.error("--sweep times FP32 only")
    args.bench = os.path.abspath(args.bench)
    if args.tf_python:
        args.tf_python = command_path(args.tf_python)
    if args.torch_python:
        args.torch_python = command_path(args.torch_python)
    else:
        candidates = [args.tf_python] if args.tf_python else []
        args.torch_python = next((c for c in candidates + [DEBIAN_PYTHON]
                                  if subprocess.run([c, "-c", "import torch"], capture_output=True).returncode == 0),
                                 DEBIAN_PYTHON)
    os.makedirs(args.out, exist_ok=True)
    shapes = {"B": args.B, "T": args.T, "D": args.D, "H": args.H, "V": args.V, "L": args.L}
    threads = [int(t) for t in args.threads.split(",")]

    case = os.path.join(os.path.abspath(args.out), "case")
    print(f"engine: timing B={args.B} T={args.T} D={args.D} H={args.H} V={args.V} L={args.L} ...", flush=True)
    engine_extra, peer_extra, tolerance = (), (), 1e-4
    if args.precision == "bf16":
        if args.device == "cuda":
            sys.exit("peers.py: --device cuda compares bf16 always (after FP32 and TF32): drop --precision bf16")
        engine_extra, peer_extra = ("--precision", "bf16"), ("--bf16",)
    # The engine says whether this CPU runs bf16 (its one-line refusal), not this script.
    mine = engine(args, shapes, case, loader=True, extra=engine_extra, refusal="needs a CPU with bfloat16 instructions")
    if mine is None:
        print("engine: this CPU has no bfloat16 instructions, so the engine runs bf16-emulated: bf16's arithmetic at "
              "FP32 speed (its times are not bf16's)", flush=True)
        engine_extra = ("--precision", "bf16-emulated")
        mine = engine(args, shapes, case, loader=True, extra=engine_extra)
    if args.precision == "bf16":
        tolerance = bf16_loss_tolerance(mine)
        print(f"bf16 loss tolerance: {tolerance:.2e} relative", flush=True)
    results = {"shapes": shapes, "engine": mine, "peers": {}, "precision": args.precision}
    if args.precision == "bf16":  # the engine's own FP32 step, the yardstick of bf16's gain
        print("engine fp32: timing ...", flush=True)
        fp32 = engine(args, shapes)
        results["peers"]["engine-fp32"] = {"runs": [fp32], "best": best_of_threads([fp32])}
        if "amx-bf16 kernels" in mine.get("engine", ""):  # the engine chose AMX: its AVX512-BF16 twin beside it
            print("engine bf16 on the AVX512-BF16 kernels: timing ...", flush=True)
            avx512 = engine(args, shapes, extra=engine_extra, env={"ENHANCED_BF16_KERNEL": "avx512-bf16"})
            results["peers"]["engine-bf16-avx512-kernels"] = {"runs": [avx512], "best": best_of_threads([avx512])}

    if args.device == "cuda":
        cuda_side_by_side(args, shapes, case, mine)
        return

    runs = []
    for t in threads:
        print(f"pytorch ({args.torch_python}): {t} thread(s) ...", flush=True)
        run = peer(args.torch_python, "peer_torch.py", case, t, args.repeats, peer_extra,
                   refusal=TORCH_BF16_REFUSAL if peer_extra else None)
        if run is None:
            print("pytorch: no bf16 LSTM on this CPU (oneDNN: no bf16 primitive without AVX-512): no row", flush=True)
            break
        run["loss_relative_error"] = check_loss("pytorch", run["loss"], mine["initial_loss"], tolerance)
        runs.append(run)
    if runs:
        results["peers"]["pytorch" + ("-bf16-autocast" if peer_extra else "")] = {"runs": runs,
                                                                                  "best": best_of_threads(runs)}

    if args.tf_python:
        runs = []
        for t in threads:
            print(f"tensorflow (vectorised): {t} thread(s) ...", flush=True)
            run = peer(args.tf_python, "peer_tf.py", case, t, args.repeats, ("--design", "vectorised", *peer_extra))
            run["loss_relative_error"] = check_loss("tensorflow-vectorised", run["loss"], mine["initial_loss"],
                                                    tolerance)
            runs.append(run)
        results["peers"]["tensorflow-vectorised" + ("-mixed-bf16" if peer_extra else "")] = {
            "runs": runs, "best": best_of_threads(runs)}
    if args.tf_python and args.precision == "fp32":
        # The original map_fn design on a small batch, against the engine's scalar-mean loss on it.
        small = dict(shapes, B=args.original_batch)
        small_case = os.path.join(os.path.abspath(args.out), "case-original")
        small_engine = engine(args, small, small_case, blend="scalar-mean", repeats=1)
        runs = []
        for t in threads:
            print(f"tensorflow (original map_fn, B={args.original_batch}): {t} thread(s) ...", flush=True)
            run = peer(args.tf_python, "peer_tf.py", small_case, t, 2, ("--design", "original", "--warmup", "1"))
            run["loss_relative_error"] = check_loss("tensorflow-original", run["loss"], small_engine["initial_loss"])
            scale = args.B / args.original_batch  # extrapolated to the full batch
            run["times"] = {k: {m: v * scale for m, v in t_.items()} for k, t_ in run["times"].items()}
            run["extrapolated_from_batch"] = args.original_batch
            runs.append(run)
        results["peers"]["tensorflow-original"] = {"runs": runs, "best": best_of_threads(runs)}

    print_table(results)
    if args.sweep:
        results["sweep"] = sweep(args, shapes, results)
        if args.plots:
            plot(results["sweep"], args.plots)
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    print(f"\nresults: {os.path.join(args.out, 'results.json')}")


def cuda_side_by_side(args, shapes, case, mine):
    """Like with like on the GPU. FP32: the engine's FP32 (with FMA) against PyTorch with TF32 off
    in cuDNN and cuBLAS (PyTorch's default lets cuDNN's LSTM use TF32), eager and compiled. TF32:
    the engine's --tf32 against PyTorch with TF32 on in both, eager. bf16: the engine's
    --precision bf16 against PyTorch's bf16 autocast, eager (skipped below compute capability 8.0). A compiled row names what ran:
    Dynamo breaks its graph at nn.LSTM unless allow_rnn is set, so the LSTM there is eager cuDNN."""
    all_results = {}
    for precision, engine_extra, peer_extra, rows, tolerance in (
            ("fp32", (), (), (("pytorch-cuda", ()), ("pytorch-cuda-compiled", ("--compile",))), 1e-4),
            # TF32 rounds the LSTM's matrix inputs to 10 bits: the two losses agree less closely.
            ("tf32", ("--tf32",), ("--tf32",), (("pytorch-cuda", ()),), 5e-3),
            # bf16: the engine's cuDNN bf16 data with FP32 math against PyTorch's autocast; the
            # tolerance from the engine's largest logit (None: bf16_loss_tolerance).
            ("bf16", ("--precision", "bf16"), ("--bf16",), (("pytorch-cuda", ()),), None)):
        if precision == "fp32":
            engine_run = mine
        else:
            case = os.path.join(os.path.abspath(args.out), f"case-{precision}")
            print(f"engine {' '.join(engine_extra)}: timing ...", flush=True)
            engine_run = engine(args, shapes, case, extra=engine_extra, refusal="needs a GPU of compute capability")
            if engine_run is None:
                print(f"engine {' '.join(engine_extra)}: refused on this GPU (compute capability below 8.0)", flush=True)
                continue
        if tolerance is None:
            tolerance = bf16_loss_tolerance(engine_run)
        results = {"shapes": shapes, "engine": engine_run, "peers": {}}
        for name, extra in rows:
            print(f"{name} {precision} ({args.torch_python}) ...", flush=True)
            run = peer(args.torch_python, "peer_torch.py", case, 1, args.repeats, ("--device", "cuda", *extra, *peer_extra))
            run["loss_relative_error"] = check_loss(f"{name} ({precision})", run["loss"], engine_run["initial_loss"],
                                                    tolerance)
            label = name + (f" [LSTM {run['lstm']}]" if "--compile" in extra else "")
            results["peers"][label] = {"runs": [run], "best": best_of_threads([run])}
        print(f"\n{precision.upper()}: engine {' '.join(engine_extra) if engine_extra else 'FP32 (FMA)'}; PyTorch "
              + "; ".join(sorted({r['runs'][0]['precision'] for r in results['peers'].values()})))
        print_table(results)
        all_results[precision] = results
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(all_results, f, indent=2)


def print_table(results):
    mine = results["engine"]
    s = results["shapes"]
    where = f"{mine['threads']} threads, {mine['blas'].split(' NO_')[0]}" if mine["device"] == "cpu" else "cuda"
    print(f"\nB={s['B']} T={s['T']} D={s['D']} H={s['H']} V={s['V']} L={s['L']}; engine: {where}; "
          "peers: the faster of their thread settings (median ms)")
    names = list(results["peers"])
    widths = {n: max(24, len(n) + 2) for n in names}
    print(f"{'figure':<16}{'engine':>10}" + "".join(f"{n:>{widths[n]}}" for n in names) + f"{'vs fastest peer':>18}")
    figures = ["train step", "inference step"]
    if "train step, sync" in mine["times"] and all("train step, sync" in results["peers"][n]["best"] for n in names):
        figures.append("train step, sync")  # GPU: each step waited for, on both sides
    for figure in figures:
        engine_ms = 1e3 * mine["times"][figure]["median_s"]
        cells, fastest = "", None
        for n in names:
            t = results["peers"][n]["best"][figure]
            ms = 1e3 * t["median_s"]
            if not n.startswith("engine"):  # the engine's own FP32 row is a yardstick, not a peer
                fastest = ms if fastest is None else min(fastest, ms)
            cells += f"{ms:>{widths[n] - 6}.1f} ({t['threads']}t)"
        ratio = f"{fastest / engine_ms:>17.2f}x" if fastest is not None else f"{'(no peer)':>18}"
        print(f"{figure:<16}{engine_ms:>10.1f}{cells}{ratio}")
    gemm = mine["gemm_gflops"]
    if not gemm:  # on a GPU there is no CPU GEMM yardstick
        return
    print(f"\nengine train step: {mine['train_gflops_achieved']:.1f} GFLOP/s = "
          f"{100 * mine['train_gflops_achieved'] / gemm:.0f}% of the machine's measured sgemm rate ({gemm:.1f} GFLOP/s)")
    if mine.get("loader_samples_per_s"):
        consumed = s["B"] / mine["times"]["train step"]["median_s"]
        print(f"loader: {mine['loader_samples_per_s']:.0f} samples/s on one core = "
              f"{mine['loader_samples_per_s'] / consumed:.0f}x what the train step consumes")


def sweep(args, shapes, results):
    peers = {n: r["best"]["train step"]["median_s"] for n, r in results["peers"].items() if n != "tensorflow-original"}
    fastest = min(peers, key=peers.get)
    threads = results["peers"][fastest]["best"]["train step"]["threads"]
    out = {"peer": fastest, "peer_threads": threads, "T": [], "B": []}
    for axis, values in (("T", (50, 100, 200, 400, 800, 1600)), ("B", (1, 4, 16, 64, 256))):
        for v in values:
            s = dict(shapes, **{axis: v})
            case = os.path.join(os.path.abspath(args.out), f"case-{axis}{v}")
            print(f"sweep {axis}={v} ...", flush=True)
            mine = engine(args, s, case, repeats=3)
            if fastest == "pytorch":
                other = peer(args.torch_python, "peer_torch.py", case, threads, 3)
            else:
                other = peer(args.tf_python, "peer_tf.py", case, threads, 3, ("--design", "vectorised"))
            check_loss(fastest, other["loss"], mine["initial_loss"])
            out[axis].append({axis: v, "engine_s": mine["times"]["train step"]["median_s"],
                              "peer_s": other["times"]["train step"]["median_s"]})
    return out


def plot(data, directory):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    os.makedirs(directory, exist_ok=True)
    for axis, label in (("T", "sequence length T (B = 64)"), ("B", "batch size B (T = 400)")):
        xs = [row[axis] for row in data[axis]]
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.plot(xs, [1e3 * r["engine_s"] for r in data[axis]], "o-", label="enhanced (CPU)")
        ax.plot(xs, [1e3 * r["peer_s"] for r in data[axis]], "s--", label=f"{data['peer']} ({data['peer_threads']} threads)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(label)
        ax.set_ylabel("training step, ms (median)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(os.path.join(directory, f"bench-train-vs-{axis}.png"), dpi=110)
        plt.close(fig)


if __name__ == "__main__":
    main()
