"""`pip install ./python` in a clean virtual environment: the compiled engine imports and the apps
are on the environment's PATH (the build folder persists, so this install is incremental)."""
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_clean_venv_gets_the_extension_and_the_apps_on_path(tmp_path):
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    environment = dict(os.environ, ENHANCED_CUDA=os.environ.get("ENHANCED_CUDA", "OFF"), PYTHONPATH="")
    install = subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", str(ROOT / "python")],
                             capture_output=True, text=True, env=environment, timeout=1500)
    assert install.returncode == 0, install.stdout + install.stderr
    bin_dir = env_dir / "bin"
    path = dict(environment, PATH=f"{bin_dir}{os.pathsep}/usr/bin:/bin")
    for app in ("enhanced-data", "enhanced-train", "enhanced-eval", "enhanced-predict", "enhanced-bench"):
        found = subprocess.run(["sh", "-c", f"command -v {app}"], capture_output=True, text=True, env=path)
        assert found.stdout.strip() == str(bin_dir / app), app
        version = subprocess.run([app, "--version"], capture_output=True, text=True, env=path)
        assert version.returncode == 0 and version.stdout.startswith("enhanced "), version.stdout + version.stderr
    imported = subprocess.run([python, "-c", "import enhanced, enhanced._core as c; print(c.version())"],
                              capture_output=True, text=True, env=environment, cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith("enhanced "), imported.stdout
    assert sys.version_info >= (3, 9)
