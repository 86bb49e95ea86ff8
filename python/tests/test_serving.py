"""enhanced.onnx: the ONNX model (run by ONNX Runtime) and the SavedModel (tf.saved_model.load)
give the Keras model's logits, for both blends and both pools, at two batch sizes."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np  # noqa: E402
import onnxruntime  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

tf.config.threading.set_intra_op_parallelism_threads(1)
tf.config.threading.set_inter_op_parallelism_threads(1)

import enhanced  # noqa: E402
from enhanced.keras import model_from_checkpoint, ragged_to_csr  # noqa: E402
from enhanced.onnx import INPUT_NAMES, export_onnx, export_saved_model, onnx_model  # noqa: E402
from enhanced.torch import EnhancedModule  # noqa: E402
from keras_cases import BLEND_POOL, ragged, random_config, random_samples, relative_difference  # noqa: E402


def random_checkpoint(path, config, rng):
    """Weights of a larger scale than an initialisation, so that every part moves the logits."""
    tensors = {name: rng.normal(0, 0.5, shape).astype(np.float32)
               for name, shape in enhanced.parameter_shapes(config).items()}
    enhanced.save_checkpoint(path, config, tensors)
    return path


def batches(rng, config):
    """Two batches of different sizes; the second has no identifier ids after its first position."""
    first, _ = random_samples(rng, config, 5)
    second, _ = random_samples(rng, config, 2)
    for sample in second:
        for position in sample:
            position[0] = []
    second[0][0][0] = [int(rng.integers(0, config.vocab_size))]
    return first, second


@pytest.mark.parametrize("blend,pool", BLEND_POOL)
def test_onnx_and_saved_model_give_keras_logits(tmp_path, blend, pool):
    rng = np.random.default_rng(400 + BLEND_POOL.index((blend, pool)))
    config = random_config(rng, blend, pool)
    checkpoint = random_checkpoint(tmp_path / "model.safetensors", config, rng)
    model = model_from_checkpoint(checkpoint)
    session = onnxruntime.InferenceSession(str(export_onnx(checkpoint, tmp_path / "model.onnx")),
                                           providers=["CPUExecutionProvider"])
    saved = tf.saved_model.load(export_saved_model(model, str(tmp_path / "saved")))
    serve = saved.signatures["serving_default"]
    worst = 0.0
    for samples in batches(rng, config):
        inputs = ragged(samples)
        logits = model(inputs).numpy()
        csr = [t.numpy() for t in ragged_to_csr(inputs, config.seq_len)]
        from_onnx = session.run(["logits"], dict(zip(INPUT_NAMES, csr)))[0]
        from_signature = serve(**dict(zip(INPUT_NAMES, map(tf.constant, csr))))["logits"].numpy()
        from_ragged = saved.ragged(inputs).numpy()
        from_ragged64 = saved.ragged(tf.cast(inputs, tf.int64)).numpy()
        for name, other in (("onnx", from_onnx), ("signature", from_signature), ("ragged", from_ragged),
                            ("ragged int64", from_ragged64)):
            assert other.shape == logits.shape and other.dtype == np.float32, name
            difference = relative_difference(other, logits)
            assert difference <= 1e-5, (name, difference)
            worst = max(worst, difference)
    print(f"{blend}/{pool} {config}: ONNX Runtime and SavedModel vs Keras, max relative difference {worst:.2e}")


@pytest.mark.parametrize("blend,pool", BLEND_POOL)
def test_onnx_model_has_no_unused_initializer(tmp_path, blend, pool):
    """ONNX Runtime warns "Removing initializer" on every session for a constant no node reads."""
    config = random_config(np.random.default_rng(7), blend, pool)
    model = onnx_model(random_checkpoint(tmp_path / "model.safetensors", config, np.random.default_rng(8)))
    read = {name for node in model.graph.node for name in node.input}
    assert [i.name for i in model.graph.initializer if i.name not in read] == []


def test_export_refuses_bad_input(tmp_path):
    config = enhanced.ModelConfig(vocab_size=7, num_labels=2, embedding_dim=2, hidden=2, seq_len=3)
    rng = np.random.default_rng(9)
    checkpoint = random_checkpoint(tmp_path / "model.safetensors", config, rng)
    _, tensors = enhanced.load_checkpoint(checkpoint)
    tensors["dense.weight"] = tensors["dense.weight"][:, :2]
    target = tmp_path / "bad.onnx"
    with pytest.raises(ValueError, match=r"'dense.weight' has shape \[2, 2\], the model needs \[2, 3\]"):
        export_onnx((config, tensors), target)
    assert not target.exists()
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "file").write_text("x")
    with pytest.raises(ValueError, match="exists and is not an empty directory"):
        export_saved_model(checkpoint, str(occupied))
    # The SavedModel checks its input as the Keras model does, as a graph assertion.
    saved = tf.saved_model.load(export_saved_model(checkpoint, str(tmp_path / "saved")))
    (tmp_path / "plain").mkdir()  # the SavedModel's directory has a plain mkdir's mode, not mkdtemp's 0700
    assert os.stat(tmp_path / "saved").st_mode == os.stat(tmp_path / "plain").st_mode
    (tmp_path / "plain").rmdir()
    samples, _ = random_samples(rng, config, 2)
    samples[1][2][2].append(0)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"field 2 \(cur_word\) must hold exactly one id"):
        saved.ragged(ragged(samples))
    assert sorted(os.listdir(tmp_path)) == ["model.safetensors", "occupied", "saved"]  # no temporaries left


def onnx_logits(path, csr):
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(["logits"], dict(zip(INPUT_NAMES, csr)))[0]


def test_export_onnx_takes_a_model_as_export_saved_model_does(tmp_path):
    """export_onnx(checkpoint path | (config, tensors) | Keras EnhancedModel | torch EnhancedModule,
    path): the checkpoint's forms and the torch module (the same tensors) give the same file, the
    Keras model (one bias per direction, the checkpoint's two summed) the same logits."""
    rng = np.random.default_rng(410)
    config = random_config(rng, "mean", "feature")
    checkpoint = random_checkpoint(tmp_path / "model.safetensors", config, rng)
    from_path = export_onnx(checkpoint, tmp_path / "path.onnx")
    from_tuple = export_onnx(enhanced.load_checkpoint(checkpoint), tmp_path / "tuple.onnx")
    from_torch = export_onnx(EnhancedModule.from_checkpoint(checkpoint), tmp_path / "torch.onnx")
    keras_model = model_from_checkpoint(checkpoint)
    from_keras = export_onnx(keras_model, tmp_path / "keras.onnx")
    assert from_path.read_bytes() == from_tuple.read_bytes() == from_torch.read_bytes()
    samples, _ = random_samples(rng, config, 4)
    inputs = ragged(samples)
    csr = [t.numpy() for t in ragged_to_csr(inputs, config.seq_len)]
    reference = onnx_logits(from_path, csr)
    assert relative_difference(onnx_logits(from_keras, csr), reference) <= 1e-6
    assert relative_difference(reference, keras_model(inputs).numpy()) <= 1e-5
    with pytest.raises(ValueError, match="expected an engine checkpoint .* got dict"):
        export_onnx({"embedding.weight": 0}, tmp_path / "bad.onnx")
    assert not (tmp_path / "bad.onnx").exists()
    # export_saved_model takes the same forms: here the torch module.
    saved = tf.saved_model.load(export_saved_model(EnhancedModule.from_checkpoint(checkpoint), str(tmp_path / "saved")))
    assert relative_difference(saved.ragged(inputs).numpy(), reference) <= 1e-5


@pytest.mark.parametrize("blend,pool", BLEND_POOL[::3])
def test_onnx_takes_int32_ids(tmp_path, blend, pool):
    """ids="int32": the inputs are int32 (an ONNX input has one type), Cast to int64 at the input;
    ONNX Runtime gives the int64 model's logits bit for bit."""
    rng = np.random.default_rng(420 + BLEND_POOL.index((blend, pool)))
    config = random_config(rng, blend, pool)
    checkpoint = random_checkpoint(tmp_path / "model.safetensors", config, rng)
    wide = export_onnx(checkpoint, tmp_path / "int64.onnx")
    narrow = export_onnx(checkpoint, tmp_path / "int32.onnx", ids="int32")
    session = onnxruntime.InferenceSession(str(narrow), providers=["CPUExecutionProvider"])
    assert [i.type for i in session.get_inputs()] == ["tensor(int32)"] * 3
    for samples in batches(rng, config):
        csr = [t.numpy() for t in ragged_to_csr(ragged(samples), config.seq_len)]
        assert all(a.dtype == np.int64 for a in csr)
        from_int64 = onnx_logits(wide, csr)
        from_int32 = onnx_logits(narrow, [a.astype(np.int32) for a in csr])
        assert from_int32.dtype == np.float32 and np.array_equal(from_int32, from_int64)
    with pytest.raises(ValueError, match=r"ids must be one of \('int64', 'int32'\), got 'int16'"):
        export_onnx(checkpoint, tmp_path / "int16.onnx", ids="int16")
