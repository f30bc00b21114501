"""The model a run trains: a `--model` spec checked in words, then loaded with float32 master
weights on the run's device.

transformers and torch are imported when a model is loaded, not when a spec is checked (the
command line checks specs before it pays for them).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envharness.integrations.trl.errors import TrainSetupError
from envharness.integrations.trl.precision import master_weights
from envharness.models import embedded
from envharness.models.device import resolve

#: Specs that name a model built or shipped offline, not a directory or a hub id.
BUILT_IN = ("embedded", "tiny", "embedded-vlm")


def check_model_spec(spec: str) -> None:
    """Refuse, in words, a model that cannot be loaded: a missing directory, one without
    `config.json`, or a name that is neither a path nor a hub id."""
    if spec.strip() == "scripted" or spec.startswith(("openai:", "trl-vllm:")):
        raise TrainSetupError(
            f"--model {spec} has no weights to train: use embedded, tiny, a model directory or a hub id"
        )
    if spec in BUILT_IN or spec.split(":")[0] == "tiny-vlm":
        return
    path = Path(spec).expanduser()
    if path.is_dir():
        if not any((path / name).is_file() for name in ("config.json", "adapter_config.json")):
            raise TrainSetupError(f"--model {spec}: not a model directory (no config.json in it)")
        return
    if path.exists():
        raise TrainSetupError(f"--model {spec}: a file, not a model directory")
    if spec.startswith(("/", ".", "~")) or spec.count("/") > 1 or "" in spec.split("/"):
        raise TrainSetupError(
            f"--model {spec}: no model directory there "
            "(use 'embedded', 'tiny', a model directory or a hub id org/name)"
        )


def load_model(spec: str, placement: Any = None, *, tools: bool = False) -> tuple[Any, Any]:
    """(model, tokenizer) for `TrainConfig.model`, with float32 weights on `placement`'s device
    (default: the CPU; the trainer's mixed precision is the placement's dtype, see precision.py).

    With `tools`, the shipped models' tokenizer gets a chat template that can call tools
    (`models/tool_template.py`), which TRL's `environment_factory` loop needs; a saved directory
    keeps the template it was saved with."""
    placement = placement or resolve("cpu")
    if spec == "embedded":
        model, tokenizer = embedded.load_model()
    elif spec == "tiny":
        model, tokenizer = embedded.tiny_test_model()
    else:
        model, tokenizer = _from_pretrained(spec)
    if tools and spec in ("embedded", "tiny"):
        from envharness.models.tool_template import with_tool_template

        with_tool_template(tokenizer)
    return master_weights(model, placement), tokenizer


def _from_pretrained(spec: str) -> tuple[Any, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:  # float32 master weights even from a bf16 checkpoint (as hub checkpoints are saved)
        return (
            AutoModelForCausalLM.from_pretrained(spec, dtype=torch.float32),
            AutoTokenizer.from_pretrained(spec),
        )
    except (OSError, ValueError) as exc:  # the hub library's long story, cut to its first line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TrainSetupError(f"cannot load model {spec!r}: {first}") from None
