"""enhanced: the Python side of the engine. The core needs NumPy only; `enhanced.keras` and
`enhanced.torch` import TensorFlow and PyTorch when they are imported themselves."""
from .checkpoint import ModelConfig, load_checkpoint, parameter_shapes, save_checkpoint
from .ebin import Ebin, read_ebin, write_ebin
from .safetensors import read_safetensors, write_safetensors

__version__ = "0.1.0"
__all__ = ["ModelConfig", "load_checkpoint", "save_checkpoint", "parameter_shapes",
           "read_safetensors", "write_safetensors", "Ebin", "read_ebin", "write_ebin"]
