"""The examples in examples/keras-notebook/ run as a user would run them, and say what they promise."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_keras_notebook_example_trains_predicts_and_goes_back_into_keras(tmp_path):
    script = ROOT / "examples" / "keras-notebook" / "notebook.py"
    code = [line for line in script.read_text().splitlines() if line.strip() and not line.startswith(('"""', "(", "import", "#"))]
    result = subprocess.run([sys.executable, script], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Keras reproduces the engine's logits within" in result.stdout
    assert "validation {'loss'" in result.stdout
    assert len(code) <= 20, "the example promises under twenty lines"


def test_the_resume_and_stream_example_continues_resumes_exactly_and_streams(tmp_path):
    script = ROOT / "examples" / "keras-notebook" / "resume_and_stream.py"
    for _ in range(2):  # run twice in one folder: the second replaces the first's runs (overwrite=True)
        result = subprocess.run([sys.executable, script], capture_output=True, text=True, cwd=tmp_path, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
    assert "then the next fit's epoch" in result.stdout
    assert "resumed epochs [1, 2]; the same bytes as the run never stopped: True" in result.stdout
    assert "streamed: 16 steps an epoch" in result.stdout
