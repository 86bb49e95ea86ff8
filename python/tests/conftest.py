"""Shared fixtures: the engine's apps (ENHANCED_APP_DIR, set by CTest) and a small trained run."""
import os
import subprocess

import pytest


def app(name):
    directory = os.environ.get("ENHANCED_APP_DIR")
    if not directory:
        pytest.skip("ENHANCED_APP_DIR is not set (CTest sets it to the build's apps/)")
    path = os.path.join(directory, name)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{path} is not built")
    return path


def run_app(name, *args, check=True):
    """Runs an engine app; returns the CompletedProcess (text). check: the exit status must be 0."""
    result = subprocess.run([app(name), *map(str, args)], capture_output=True, text=True, timeout=600)
    if check and result.returncode != 0:
        raise AssertionError(f"{name} {' '.join(map(str, args))} exited {result.returncode}:\n{result.stderr}")
    return result


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory):
    """The engine's demo task (enhanced-data demo): train/valid/test .ebin and .jsonl, emb.bin."""
    directory = tmp_path_factory.mktemp("demo")
    run_app("enhanced-data", "demo", directory)
    return directory


@pytest.fixture(scope="session")
def trained_checkpoint(demo_data, tmp_path_factory):
    """A checkpoint of a few training steps on the demo task, small enough for quick tests."""
    out = tmp_path_factory.mktemp("run") / "run"
    run_app("enhanced-train", "--data", demo_data / "train.ebin", "--out", out, "--steps", 3,
            "--hidden", 4, "--embedding-dim", 8, "--device", "cpu", "--quiet")
    return out / "last.safetensors"
