#!/usr/bin/env python3
"""A static profile of the CPU GEMM kernels' inner loops on CPUs this machine may not have: each
kernel compiled as the build compiles it (g++ -O3), its innermost multiply loop cut out of the
object, and llvm-mca's model of a CPU asked how many cycles an iteration takes and which ports
bind. A model, not a measurement: it knows nothing of caches, frequency, the other hyperthread
or what surrounds the loop, and LLVM 14 models Sapphire Rapids with its Ice Lake tables. It
answers one question: does the loop itself leave the FMA ports idle?

usage: bench/kernel_mca.py [--cpus sapphirerapids,skylake-avx512,znver3] [--llvm-mca llvm-mca]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# (label, source, symbol pattern, kind of multiply instruction, flop per instruction)
KERNELS = (
    ("fp32 small_gemm, AVX-512 clone (8 x 32 tile)", "src/layers/cpu/small_gemm.cpp",
     r"small_gemm::multiply\(.*\) \[clone \.arch_x86_64_v4\]", r"vfmadd\w+ps .*zmm", 32),
    ("fp32 small_gemm, AVX2 clone (3 x 32 tile)", "src/layers/cpu/small_gemm.cpp",
     r"small_gemm::multiply\(.*\) \[clone \.arch_x86_64_v3\]", r"vfmadd\w+ps .*ymm", 16),
    ("bf16 AVX512-BF16 kernel (8 x 32 tile)", "src/layers/cpu/bf16_gemm.cpp",
     r"bf16_gemm::avx512::tile<8>", r"vdpbf16ps .*zmm", 64),
)
# FP32 FMA peak a cycle (two FMA ports of the vector width), and what a VDPBF16PS counts as there.
PEAK_FP32 = {"sapphirerapids": 64, "skylake-avx512": 64, "icelake-server": 64, "znver3": 32, "znver2": 32}


def disassembly(source, build_dir):
    obj = os.path.join(build_dir, os.path.basename(source) + ".o")
    subprocess.run(["g++", "-O3", "-std=c++20", "-fopenmp", "-DNDEBUG", "-I", os.path.join(REPO, "src"), "-I",
                    os.path.join(REPO, "include"), "-c", os.path.join(REPO, source), "-o", obj], check=True)
    return subprocess.run(["objdump", "-d", "--no-show-raw-insn", "-C", obj], check=True, capture_output=True,
                          text=True).stdout


def innermost_loop(text, symbol, multiply):
    """The shortest backward-branching range of the symbol with at least 8 multiply instructions."""
    lines, inside = [], False
    for line in text.splitlines():
        if re.match(r"^[0-9a-f]+ <", line):
            inside = re.search(symbol, line) is not None
        elif inside:
            m = re.match(r"\s*([0-9a-f]+):\t(.*)", line)
            if m:
                lines.append((int(m.group(1), 16), m.group(2).strip()))
    best = None
    for address, instruction in lines:
        m = re.match(r"j\w+\s+([0-9a-f]+)", instruction)
        if not m or int(m.group(1), 16) >= address:
            continue
        body = [i for a, i in lines if int(m.group(1), 16) <= a <= address]
        if sum(bool(re.search(multiply, i)) for i in body) >= 8 and (best is None or len(body) < len(best)):
            best = body
    if best is None:
        sys.exit(f"kernel_mca.py: no loop of 8 or more '{multiply}' in {symbol}")
    return [i for i in best if not i.startswith(("j", "cmp"))]  # straight-line: the branch is free


def mca(llvm_mca, cpu, loop, build_dir):
    path = os.path.join(build_dir, "loop.s")
    with open(path, "w") as f:
        f.write("\n".join(loop) + "\n")
    out = subprocess.run([llvm_mca, f"-mcpu={cpu}", "-iterations=1000", "-resource-pressure", path],
                         capture_output=True, text=True)
    if out.returncode != 0:
        return None, out.stderr.strip().splitlines()[-1]
    cycles = int(re.search(r"Total Cycles:\s+(\d+)", out.stdout).group(1)) / 1000
    header = re.search(r"Resources:\n((?:\[\d+\].*\n)+)", out.stdout)
    names = [re.sub(r"^\[\d+\]\s+- ", "", l).strip() for l in header.group(1).splitlines()] if header else []
    pressure = re.search(r"Resource pressure per iteration:\n.*\n(.*)\n", out.stdout).group(1).split()
    busiest = max(range(len(pressure)), key=lambda i: float(pressure[i]) if pressure[i] != "-" else 0)
    return cycles, f"busiest port {names[busiest] if names else busiest}: {pressure[busiest]} cycles an iteration"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--cpus", default="sapphirerapids,skylake-avx512,znver3")
    p.add_argument("--llvm-mca", default="llvm-mca")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as build_dir:
        objects = {}
        for label, source, symbol, multiply, flop in KERNELS:
            text = objects.setdefault(source, disassembly(source, build_dir))
            loop = innermost_loop(text, symbol, multiply)
            count = sum(bool(re.search(multiply, i)) for i in loop)
            print(f"{label}: {len(loop)} instructions an iteration, {count} multiplies ({count * flop} flop)")
            for cpu in args.cpus.split(","):
                cycles, note = mca(args.llvm_mca, cpu, loop, build_dir)
                if cycles is None:
                    print(f"  {cpu:16s} llvm-mca: {note}")
                    continue
                rate = count * flop / cycles
                peak = PEAK_FP32.get(cpu)
                share = f", {100 * rate / peak:.0f}% of the FP32 FMA peak ({peak})" if peak else ""
                print(f"  {cpu:16s} {cycles:5.2f} cycles an iteration = {rate:5.1f} flop a cycle{share}; {note}")


if __name__ == "__main__":
    main()
