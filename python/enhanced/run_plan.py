"""What Model.fit is asked for, checked before any work: its keywords (enhanced-train's training
controls by name), the output folder, the class weights, and on a resume the run's recorded plan,
which fills in every keyword the caller did not give (as enhanced-train --resume does)."""
import contextlib
import dataclasses
import json
import os
import re

import numpy as np

from .checkpoint import read_config_and_label_names
from .safetensors import read_metadata, unwritable_folder

# The run's length and order when neither the caller nor a resumed run gives them: Keras's
# (batch_size 32, which fit passes to enhanced-train, whose own default is 64; epochs 1 and seed 0
# are enhanced-train's too).
DEFAULTS = {"epochs": 1, "batch_size": 32, "seed": 0}

# How fit spells enhanced-train's flags (underscores for dashes) where the keyword is not the
# flag's own name (--batch-size is batch_size, --lr is lr).
_KEYWORD_OF_FLAG = {"data": "x", "valid": "validation_data", "resume": "resume=True", "overwrite": "overwrite=True",
                    "no_shuffle": "shuffle=False", "class_weights": "class_weight", "quiet": "verbose=0"}

# enhanced-train's flags that fit gives from its own arguments, or that have no place in fit, and
# what to use instead where that is more than the keyword of _KEYWORD_OF_FLAG.
_OWN = {"data": "the training data is x", "valid": "the validation data is validation_data",
        "out": None, "resume": None, "epochs": None, "batch_size": None, "seed": None, "no_shuffle": None,
        "class_weights": None, "label_names": "Model(label_names=...)",
        "init_from": "Model.load(checkpoint).fit(...) continues from a checkpoint", "quiet": None,
        "help": "docs/python.md", "vocab_size": "Model(...)", "num_labels": "Model(...)",
        "embedding_dim": "Model(...)", "hidden": "Model(...)", "blend": "Model(...)", "pool": "Model(...)",
        "pretrained": "Model(pretrained=...)"}


def in_keywords(message):
    """An engine message (which names enhanced-train's flags) as fit, predict and evaluate's
    caller reads it: each --flag named as its keyword."""
    def keyword(match):
        name = match.group(1).replace("-", "_")
        return _KEYWORD_OF_FLAG.get(name, name)
    return re.sub(r"(?<![\w/.-])--([a-z][a-z0-9-]*)", keyword, message)


@contextlib.contextmanager
def keyword_errors():
    """The engine's ValueErrors raised again in keywords (in_keywords); a callback's own
    exception (marked `from_callback` by fit's bridge) passes unchanged."""
    try:
        yield
    except ValueError as error:
        text = str(error)
        if getattr(error, "from_callback", False) or in_keywords(text) == text:
            raise
        raise ValueError(in_keywords(text)) from None


def check_controls(controls, flag_names, switch_names):
    """Each keyword names one of enhanced-train's training controls (flag_names: its flags' long
    names); anything else is a ValueError naming it, before any work. A switch (switch_names: the
    flags that take no value) is given True or False; any other control a value, never a bool
    (lr=True would take the next flag as its value)."""
    allowed = {name.replace("-", "_") for name in flag_names} - set(_OWN)
    switches = {name.replace("-", "_") for name in switch_names}
    for name, value in controls.items():
        if name not in allowed:
            hint = _OWN.get(name) or (_KEYWORD_OF_FLAG.get(name) if name in _OWN else None)
            raise ValueError(f"fit: unknown keyword argument '{name}'" + (f" (use {hint})" if hint else "") +
                             "; fit takes x, y, validation_data, epochs, batch_size, callbacks, out, seed, shuffle, "
                             "verbose, resume, class_weight and enhanced-train's training controls (docs/python.md)")
        if name in switches:
            boolean(value, name)
        elif isinstance(value, (bool, np.bool_)):
            raise ValueError(f"{name} takes a value (enhanced-train's --{name.replace('_', '-')} VALUE), got {value!r}")


def boolean(value, name):
    """value as a bool; anything but a bool (1, "yes") is a ValueError naming it."""
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def resolve_out(out, resume):
    """out as an absolute path, resolved once (a later os.chdir changes nothing), or None (a new
    temporary folder, made when the run starts). A folder that cannot be written is refused now."""
    if out is None:
        if resume:
            raise ValueError("out: resume=True continues the run in out: give its folder")
        return None
    if not isinstance(out, (str, os.PathLike)):
        raise ValueError(f"out must be a folder's path (a str or os.PathLike), got {type(out).__name__}")
    out = os.path.abspath(os.fspath(out))
    problem = unwritable_folder(out)
    if problem:
        raise ValueError(f"out: {problem}")
    return out


def recorded_options(out):
    """The options a run in `out` recorded (its state file's run_options), as a dict."""
    path = os.path.join(out, "optimizer.safetensors")
    if not os.path.isfile(path):
        raise ValueError(f"out: no run to resume in {out} (it has no optimizer.safetensors)")
    try:
        return json.loads(read_metadata(path)["run_options"])
    except (KeyError, ValueError) as e:
        raise ValueError(f"out: {path} holds no readable run_options ({e})") from None


def memory_set_name(name, num_samples):
    """What the engine (and a run's record) calls a set given in memory: in angle brackets, which
    the engine records as it is, never as a path."""
    return f"<{name}: {num_samples} samples in memory>"


# What the engine records as a validation_data read a pass each validation (an iterable of batches).
STREAMED_VALIDATION = "<validation_data: a stream of batches>"
_MEMORY_SET = re.compile(r"<validation_data: (\d+) samples in memory>$")  # memory_set_name's, as recorded


def resumed_validation(recorded, out):
    """validation_data for a resume that gives none: the run's recorded .ebin file, as
    enhanced-train --resume takes its --valid; None where the run did not validate. A run that
    validated on a set given in memory is refused: the run does not hold that set."""
    valid = recorded.get("valid", "")
    if not valid:
        return None
    match = _MEMORY_SET.search(valid)
    if match:
        raise ValueError(f"validation_data: the run being resumed in {out} validated on {match.group(1)} samples "
                         "given in memory each epoch, which it does not hold: pass them again "
                         "(validation_data=(x_valid, y_valid))")
    if valid == STREAMED_VALIDATION:
        raise ValueError(f"validation_data: the run being resumed in {out} validated on a stream of batches, "
                         "which it does not hold: pass it again (validation_data=the same dataset)")
    return valid


def class_weight_values(class_weight, num_labels):
    """class_weight as the engine takes it: None, a rule ("balanced") or a list of L weights (a dict
    {label: weight}, unnamed labels 1.0, or a sequence of L). Keys must be labels, weights finite
    and non-negative."""
    if class_weight is None or (isinstance(class_weight, str) and class_weight == "balanced"):
        return class_weight
    if isinstance(class_weight, (str, bytes, os.PathLike)):
        raise ValueError(f"class_weight must be a dict {{label: weight}}, a list of {num_labels} weights or "
                         f"'balanced', got {class_weight!r}")
    if isinstance(class_weight, dict):
        bad = [k for k in class_weight if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer))
               or not 0 <= k < num_labels]
        if bad:
            raise ValueError(f"class_weight: key {bad[0]!r} is not a label (labels are 0..{num_labels - 1})")
        weights = [class_weight.get(label, 1.0) for label in range(num_labels)]
    else:
        try:
            weights = list(class_weight)
        except TypeError:
            raise ValueError(f"class_weight must be a dict {{label: weight}}, a list of {num_labels} weights or "
                             f"'balanced', got {class_weight!r}") from None
        if len(weights) != num_labels:
            raise ValueError(f"class_weight: {len(weights)} weights for {num_labels} labels")
    try:
        weights = [float(w) for w in weights]
    except (TypeError, ValueError):
        raise ValueError("class_weight: the weights must be numbers") from None
    if not all(np.isfinite(w) and w >= 0 for w in weights):
        raise ValueError(f"class_weight: the weights must be finite and non-negative, got {weights}")
    return weights


def class_weight_mean_words(class_weight, resume, controls):
    """Keras' meaning of class_weight for a new run: each sample weighs w[y] and the loss is their
    weighted sum over the batch size (its "sum_over_batch_size"), enhanced-train's
    --class-weight-mean batch, not its default (torch's, over the weights' sum). A resume keeps the
    run's recorded mean; a class_weight_mean keyword (a training control) chooses for itself."""
    if class_weight is None or resume or "class_weight_mean" in controls:
        return []
    return ["--class-weight-mean", "batch"]


def check_same_labels(recorded, label_names, class_weight):
    """A resume keeps the run's label names and class weights: other ones are refused, by name."""
    names = recorded.get("label_names", [])
    if label_names is not None and list(label_names) != names:
        raise ValueError(f"label_names: {list(label_names)} differ from the run being resumed's "
                         f"{names or 'none'}; a resumed run keeps its label names")
    if class_weight is None:
        return
    if isinstance(class_weight, str):
        same, theirs = class_weight == recorded.get("class_weights", ""), recorded.get("class_weights") or "none"
    else:
        theirs = [float.fromhex(w) for w in recorded.get("class_weight_values", [])]
        same = np.array_equal(np.float32(class_weight), np.float32(theirs))
    if not same:
        raise ValueError(f"class_weight: {class_weight} differs from the run being resumed's {theirs}; "
                         "a resumed run keeps its class weights")


def check_same_model(config, out, recorded):
    """A resume continues the run's model: a Model of another shape is refused before any work,
    naming the first setting that differs (ModelConfig's order), the model's value and the run's.
    The run's: its recorded options, and its checkpoint's seq_len (the data's T, not an option)."""
    theirs = {key: recorded[key] for key in ("vocab_size", "num_labels", "embedding_dim", "hidden", "blend", "pool")
              if key in recorded}
    last = os.path.join(out, "last.safetensors")
    if os.path.isfile(last):
        theirs["seq_len"] = read_config_and_label_names(last)[0].seq_len
    for field in dataclasses.fields(config):
        mine = getattr(config, field.name)
        if field.name in theirs and theirs[field.name] != mine:
            raise ValueError(f"{field.name}: the model's is {mine!r}, the run being resumed in {out} has "
                             f"{theirs[field.name]!r}; a resumed run keeps its model (Model.load(its "
                             "last.safetensors) is that model)")


def plan(given, recorded, controls):
    """epochs, batch_size and drop_last of the run: the caller's, else the resumed run's, else
    enhanced-train's defaults (what the progress and History show)."""
    recorded = recorded or {}
    out = {key: given[key] if given.get(key) is not None else recorded.get(key, DEFAULTS[key])
           for key in ("epochs", "batch_size")}
    out["drop_last"] = bool(controls.get("drop_last", recorded.get("drop_last", False)))
    return out
