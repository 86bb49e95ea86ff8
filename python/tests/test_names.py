"""The NumPy-only modules' copies of the engine's names equal the engine's own tables."""
import pytest

from enhanced import checkpoint

try:
    from enhanced import _core
    _MISSING = ""
except ImportError as error:  # a NumPy-only install: nothing to compare against
    _core = None
    _MISSING = f"enhanced._core is not built ({error}); pip install ./python builds it"


@pytest.mark.skipif(_core is None, reason=_MISSING)
@pytest.mark.parametrize("name", ["BLENDS", "POOLS"])
def test_checkpoint_names_equal_the_engines(name):
    assert getattr(checkpoint, name) == tuple(getattr(_core, name))
