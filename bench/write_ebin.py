"""Times enhanced.write_ebin on N samples of T positions with 0-5 identifier and 0-5 auxiliary
ids per position (uniform), from each input form: CSR arrays, a tf.RaggedTensor and nested
lists. Prints the median wall and CPU time of --repeat runs per form. Run it on one core:

    taskset -c 0 .venv-test/bin/python bench/write_ebin.py [--samples 20000] [--seq-len 400]
"""
import argparse
import os
import platform
import tempfile
import time

import numpy as np

import enhanced


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def random_csr(rng, num_samples, seq_len, vocab=50_000):
    positions = num_samples * seq_len
    csr = {"cur_word": rng.integers(0, vocab, (num_samples, seq_len))}
    for name in ("identifier", "auxiliary"):
        lengths = rng.integers(0, 6, (num_samples, seq_len))
        csr[f"{name}_lengths"] = lengths
        csr[f"{name}_ids"] = rng.integers(0, vocab, int(lengths.sum()))
    return csr, positions


def timed(write, repeat):
    """Median wall and CPU seconds (this process: on a shared machine the CPU time leaves out the
    time other processes held the core)."""
    wall, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        write()
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - start_cpu)
    return float(np.median(wall)), float(np.median(cpu))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=20_000)
    parser.add_argument("--seq-len", type=int, default=400)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--forms", default="csr,ragged,lists")
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    csr, positions = random_csr(rng, args.samples, args.seq_len)
    labels = rng.integers(0, 104, args.samples)
    print(f"{cpu_name()}, {len(os.sched_getaffinity(0))} core(s) allowed; N={args.samples} T={args.seq_len}, "
          f"{csr['identifier_ids'].size + csr['auxiliary_ids'].size + positions} ids")
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "out.ebin")
        forms = args.forms.split(",")
        data = {"csr": lambda: csr}
        enhanced.write_ebin(path, csr, labels)
        if "ragged" in forms:
            ragged = enhanced.read_ebin(path).to_ragged()
            data["ragged"] = lambda: ragged
        if "lists" in forms:
            lists = enhanced.read_ebin(path).to_lists()  # what ragged.to_list() gives, much faster
            data["lists"] = lambda: lists
        for form in forms:
            samples = data[form]()
            wall, cpu = timed(lambda: enhanced.write_ebin(path, samples, labels), args.repeat)
            print(f"{form:7s} wall {wall:.2f} s  cpu {cpu:.2f} s  (median of {args.repeat}; "
                  f"{os.path.getsize(path) / 1e6:.0f} MB, fsync included)", flush=True)


if __name__ == "__main__":
    main()
