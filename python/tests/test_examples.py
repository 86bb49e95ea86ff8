"""examples/keras-notebook/notebook.py runs as a user would run it, and says what it promises."""
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
