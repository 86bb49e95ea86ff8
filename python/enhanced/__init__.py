"""enhanced: the engine in Python. `enhanced.Model` trains with the compiled C++ engine in this
process (enhanced._core, built by `pip install ./python`); the rest needs NumPy only, and
`enhanced.keras` and `enhanced.torch` import TensorFlow and PyTorch when they are imported."""
from .checkpoint import ModelConfig, load_checkpoint, parameter_shapes, save_checkpoint
from .ebin import Ebin, read_ebin, write_ebin
from .model import History, Model
from .safetensors import read_safetensors, write_safetensors

__version__ = "0.1.0"
__all__ = ["ModelConfig", "load_checkpoint", "save_checkpoint", "parameter_shapes",
           "read_safetensors", "write_safetensors", "Ebin", "read_ebin", "write_ebin", "Model", "History"]
