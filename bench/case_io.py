"""Reads a bench case written by `enhanced-bench --dump-case DIR`: the engine's initial weights
(checkpoint.safetensors, SPEC names) and the batch (batch.safetensors, CSR), as NumPy arrays.
Uses tests/reference/safetensors_io.py (plain NumPy), so every peer reads the same bytes."""
import os
import sys

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
