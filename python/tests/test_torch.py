"""enhanced.torch.EnhancedModule against the engine: checkpoints load with strict=True, the
module's predictions and loss are enhanced-eval's, and a state_dict saved from PyTorch is what
the engine then evaluates."""
import csv
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import enhanced
from enhanced.torch import EnhancedModule
from conftest import run_app

torch.set_num_threads(1)


@pytest.fixture(scope="module", params=[("mean", "feature"), ("scalar-mean", "feature"), ("mean", "time"),
                                        ("scalar-mean", "time")], ids=lambda p: f"{p[0]}-{p[1]}")
def checkpoint(request, demo_data, tmp_path_factory):
    blend, pool = request.param
    out = tmp_path_factory.mktemp("run") / "run"
    run_app("enhanced-train", "--data", demo_data / "train.ebin", "--out", out, "--steps", 40, "--lr", 0.01,
            "--pretrained", demo_data / "emb.bin", "--embedding-dim", 32, "--hidden", 8, "--blend", blend, "--pool", pool,
            "--device", "cpu", "--quiet")
    return out / "last.safetensors"


def engine_eval(demo_data, checkpoint, tmp_path):
    """enhanced-eval's loss and its per-sample (predicted, probability) rows."""
    predictions = tmp_path / "predictions.csv"
    result = json.loads(run_app("enhanced-eval", "--data", demo_data / "test.ebin", "--checkpoint", checkpoint,
                                "--json", "--device", "cpu", "--predictions", predictions).stdout)
    with open(predictions) as f:
        rows = list(csv.DictReader(f))
    return result["loss"], np.array([int(r["predicted"]) for r in rows]), np.array([float(r["probability"]) for r in rows])


def softmax(logits):
    return torch.softmax(torch.from_numpy(logits).double(), 1).numpy()


def mean_cross_entropy(logits, labels):
    return F.cross_entropy(torch.from_numpy(logits).double(), torch.from_numpy(np.asarray(labels, np.int64))).item()


def test_state_dict_names_are_the_checkpoint_names(trained_checkpoint):
    config, tensors = enhanced.load_checkpoint(trained_checkpoint)
    module = EnhancedModule(config)
    assert sorted(module.state_dict()) == sorted(enhanced.parameter_shapes(config))
    for name, shape in enhanced.parameter_shapes(config).items():
        assert tuple(module.state_dict()[name].shape) == shape
    module.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)
    for name, array in tensors.items():
        assert np.array_equal(module.state_dict()[name].numpy(), array)
    with pytest.raises(RuntimeError, match="Missing key"):
        module.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items() if k != "dense.bias"}, strict=True)


def test_loss_and_predictions_are_the_engines(checkpoint, demo_data, tmp_path):
    engine_loss, predicted, probability = engine_eval(demo_data, checkpoint, tmp_path)
    module = EnhancedModule.from_checkpoint(checkpoint)
    test = enhanced.read_ebin(demo_data / "test.ebin")
    logits = module.predict(test, batch_size=128)
    assert logits.shape == (len(test), module.config.num_labels)
    loss = mean_cross_entropy(logits, test.labels)
    assert loss == pytest.approx(engine_loss, rel=1e-5)
    probabilities = softmax(logits)
    assert np.abs(probabilities.max(1) - probability).max() <= 1e-6  # the CSV has 6 decimals
    top2 = np.sort(probabilities, 1)[:, -2:]
    clear = top2[:, 1] - top2[:, 0] > 1e-5
    assert clear.mean() > 0.9 and np.array_equal(probabilities.argmax(1)[clear], predicted[clear])
    # The check can fail: the same weights with the other blend predict other probabilities.
    other = "mean" if module.config.blend == "scalar-mean" else "scalar-mean"
    changed = EnhancedModule(enhanced.ModelConfig(**{**module.config.__dict__, "blend": other}))
    changed.load_state_dict(module.state_dict(), strict=True)
    assert np.abs(softmax(changed.predict(test)).max(1) - probability).max() > 1e-4


def random_batch(rng, B, T, V, most_ids=5):
    lengths = rng.integers(0, most_ids + 1, (B, T))
    lengths[0, :2] = 0  # empty identifier lists
    ids = rng.integers(0, V, int(lengths.sum()))
    return rng.integers(0, V, (B, T)), ids, lengths


def naive_blend(weight, cur_word, ids, lengths, blend):
    """The blend of docs/model.md, one position at a time (float64)."""
    weight = weight.astype(np.float64)
    B, T = cur_word.shape
    x, at = np.zeros((B, T, weight.shape[1])), 0
    for b in range(B):
        for t in range(T):
            rows = weight[ids[at:at + lengths[b, t]]]
            at += lengths[b, t]
            current = weight[cur_word[b, t]]
            if len(rows) == 0:
                x[b, t] = current
            else:
                x[b, t] = 0.5 * (rows.mean(0) if blend == "mean" else rows.mean()) + 0.5 * current
    return x


@pytest.mark.parametrize("blend", ["mean", "scalar-mean"])
def test_csr_and_padded_forms_agree_with_the_naive_blend(blend):
    rng = np.random.default_rng(1)
    config = enhanced.ModelConfig(vocab_size=50, num_labels=3, embedding_dim=6, hidden=5, seq_len=7, blend=blend)
    module = EnhancedModule(config)
    cur_word, ids, lengths = random_batch(rng, 4, 7, 50)
    x = module.blend(torch.from_numpy(cur_word), torch.from_numpy(ids),
                     torch.from_numpy(np.concatenate([[0], np.cumsum(lengths)])))
    expected = naive_blend(module.embedding.weight.detach().numpy(), cur_word, ids, lengths, blend)
    assert np.abs(x.detach().numpy() - expected).max() < 1e-6
    csr = module(cur_word, ids, lengths)
    offsets = module(cur_word, ids, identifier_offsets=np.concatenate([[0], np.cumsum(lengths)]))
    K = int(lengths.max()) + 2
    padded = np.full((4, 7, K), -1)  # padding of any value, here not even an id
    mask = np.arange(K) < lengths[..., None]
    padded[mask] = ids
    by_lengths = module(cur_word, padded, lengths)
    by_mask = module(cur_word, padded, identifier_mask=mask)
    assert csr.shape == (4, 3)
    for other in (offsets, by_lengths, by_mask):
        assert torch.equal(other, csr)


def test_bad_batches_are_refused():
    config = enhanced.ModelConfig(vocab_size=50, num_labels=3, embedding_dim=6, hidden=5, seq_len=7)
    module = EnhancedModule(config)
    cur_word, ids, lengths = random_batch(np.random.default_rng(2), 2, 7, 50)
    with pytest.raises(ValueError, match="T = 7"):
        module(cur_word[:, :6], ids, lengths[:, :6])
    with pytest.raises(ValueError, match="positions holding"):
        module(cur_word, ids[:-1], lengths)
    with pytest.raises(ValueError, match="exactly one of"):
        module(cur_word, ids)
    with pytest.raises(ValueError, match="integer ids"):
        module(cur_word, ids.astype(np.float32), lengths)


def padded(ids, lengths):
    """(B, T, K) ids padded with -1 (not an id) from the CSR form."""
    K = int(lengths.max()) + 1
    out = np.full(lengths.shape + (K,), -1)
    out[np.arange(K) < lengths[..., None]] = ids
    return out


@pytest.mark.parametrize("form", ["csr", "offsets", "padded", "mask"])
def test_bad_ids_and_lengths_name_the_sample_and_position(form):
    """Out-of-range ids and negative lengths are ValueErrors naming the place, in every input form,
    not torch's IndexError (or, for a negative padded length, silently no ids)."""
    config = enhanced.ModelConfig(vocab_size=50, num_labels=3, embedding_dim=6, hidden=5, seq_len=7)
    module = EnhancedModule(config)
    cur_word, ids, lengths = random_batch(np.random.default_rng(3), 3, 7, 50)
    lengths[1, 4] = max(lengths[1, 4], 2)
    ids = np.random.default_rng(4).integers(0, 50, int(lengths.sum()))
    second_id_of_1_4 = int(lengths.reshape(-1)[:7 + 4].sum()) + 1

    def call(cur_word, ids, lengths):
        if form == "csr":
            return module(cur_word, ids, lengths)
        if form == "offsets":
            return module(cur_word, ids, identifier_offsets=np.concatenate([[0], np.cumsum(lengths)]))
        if form == "padded":
            return module(cur_word, padded(ids, lengths), lengths)
        mask = np.arange(lengths.max() + 1) < lengths[..., None]
        return module(cur_word, padded(ids, lengths), identifier_mask=mask)

    assert call(cur_word, ids, lengths).shape == (3, 3)  # the good batch runs in this form
    for bad_id in (50, -2):
        bad = ids.copy()
        bad[second_id_of_1_4] = bad_id
        message = rf"identifier ids must be in \[0, 50\): sample 1, position 4 holds {bad_id}"
        with pytest.raises(ValueError, match=message):
            call(cur_word, bad, lengths)
    bad_cur = cur_word.copy()
    bad_cur[2, 6] = 50
    with pytest.raises(ValueError, match=r"cur_word ids must be in \[0, 50\): sample 2, position 6 holds 50"):
        call(bad_cur, ids, lengths)
    if form in ("csr", "offsets", "padded"):  # a mask has no lengths to get wrong
        bad_lengths = lengths.copy()
        bad_lengths[1, 4], bad_lengths[1, 5] = -1, bad_lengths[1, 5] + bad_lengths[1, 4] + 1  # the same sum
        name = "identifier_lengths" if form == "padded" else "identifier lengths"
        with pytest.raises(ValueError, match=rf"{name} must be in \[0, \d+\): sample 1, position 4 holds -1"):
            if form == "padded":  # laid out by the good lengths, then given the bad ones
                module(cur_word, padded(ids, lengths), bad_lengths)
            else:
                call(cur_word, ids, bad_lengths)


def test_pytorch_state_dict_back_into_the_engine(trained_checkpoint, demo_data, tmp_path):
    """Weights changed in PyTorch, saved with torch.save, loaded again, written with
    enhanced.save_checkpoint: the engine evaluates exactly what PyTorch computes."""
    module = EnhancedModule.from_checkpoint(trained_checkpoint)
    train = enhanced.read_ebin(demo_data / "train.ebin").to_csr(0, 64)
    labels = torch.from_numpy(enhanced.read_ebin(demo_data / "train.ebin").labels[:64].astype(np.int64))
    optimizer = torch.optim.SGD(module.parameters(), lr=0.5)
    for _ in range(3):
        optimizer.zero_grad()
        F.cross_entropy(module(train["cur_word"], train["identifier_ids"], train["identifier_lengths"]), labels).backward()
        optimizer.step()
    torch.save(module.state_dict(), tmp_path / "state.pt")
    state = torch.load(tmp_path / "state.pt")
    restored = EnhancedModule(module.config)
    restored.load_state_dict(state, strict=True)
    path = tmp_path / "from-torch.safetensors"
    enhanced.save_checkpoint(path, module.config, {name: t.numpy() for name, t in state.items()})
    test = enhanced.read_ebin(demo_data / "test.ebin")
    logits = restored.predict(test)
    engine_loss, _, engine_probability = engine_eval(demo_data, path, tmp_path)
    assert engine_loss == pytest.approx(mean_cross_entropy(logits, test.labels), rel=1e-5)
    assert np.abs(softmax(logits).max(1) - engine_probability).max() <= 1e-6
    before = engine_eval(demo_data, trained_checkpoint, tmp_path)[2]
    assert np.abs(engine_probability - before).max() > 1e-3  # the PyTorch steps changed the engine's answers
    again = tmp_path / "again.safetensors"
    restored.save_checkpoint(again)
    assert again.read_bytes() == path.read_bytes()
