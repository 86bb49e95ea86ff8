"""What the bench peers share: reading a bench case written by `enhanced-bench --dump-case DIR`: the engine's initial weights
(checkpoint.safetensors, the checkpoint's names) and the batch (batch.safetensors, CSR), as NumPy arrays.
Uses tests/reference/safetensors_io.py (plain NumPy), so every peer reads the same bytes."""
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
from safetensors_io import read_safetensors  # noqa: E402


def load_case(directory):
    weights, metadata = read_safetensors(os.path.join(directory, "checkpoint.safetensors"))
    batch, batch_metadata = read_safetensors(os.path.join(directory, "batch.safetensors"))
    config = {key: metadata[key] for key in ("vocab_size", "embedding_dim", "hidden", "seq_len", "num_labels")}
    config = {key: int(value) for key, value in config.items()}
    config["blend"], config["pool"] = metadata["blend"], metadata["pool"]
    config["batch_size"] = int(batch_metadata["batch_size"])
    return config, weights, batch


def timed(body, warmup, repeats):
    """Runs body() warmup times untimed, then repeats times timed; body must finish its work before
    returning (TensorFlow's steps return a tensor the caller converts, which waits for it)."""
    for _ in range(warmup):
        body()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        body()
        seconds.append(time.perf_counter() - start)
    return {"min_s": min(seconds), "median_s": statistics.median(seconds), "max_s": max(seconds)}
