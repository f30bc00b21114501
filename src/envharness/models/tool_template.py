"""A chat template that can call tools, for the shipped ChatML models (`embedded`, `tiny`).

SmolLM2's own template renders only `role` and `content`: it drops an assistant's
`tool_calls` and has no `tools=` section, so TRL refuses it for `environment_factory`
("The provided chat template does not support tool calling"). `TOOL_CHAT_TEMPLATE` is
Qwen2.5's tool-calling template (the Hermes form: a `<tools>` list in the system turn,
calls as `<tool_call>{"name": ..., "arguments": ...}</tool_call>`, results as
`<tool_response>` in a user turn) on the same ChatML tokens, with SmolLM2's own default
system line instead of Qwen's. Conversations without tools render exactly as before.

`with_tool_template(tokenizer)` installs it together with the response template that
parses such calls back (TRL's Qwen one), so `GRPOTrainer` and `tokenizer.parse_response`
read the model's calls without recognising the template by its text.
"""

from __future__ import annotations

from typing import Any

SMOLLM_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

TOOL_CHAT_TEMPLATE = (
    "{%- if tools %}\n"
    "    {{- '<|im_start|>system\\n' }}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n"
    "    {%- else %}\n"
    f"        {{{{- '{SMOLLM_SYSTEM}' }}}}\n"
    "    {%- endif %}\n"
    '    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n'
    'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n'
    "    {%- for tool in tools %}\n"
    '        {{- "\\n" }}\n'
    "        {{- tool | tojson }}\n"
    "    {%- endfor %}\n"
    '    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments '
    'within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": '
    '<args-json-object>}\\n</tool_call><|im_end|>\\n" }}\n'
    "{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n"
    "    {%- else %}\n"
    f"        {{{{- '<|im_start|>system\\n{SMOLLM_SYSTEM}<|im_end|>\\n' }}}}\n"
    "    {%- endif %}\n"
    "{%- endif %}\n"
    "{%- for message in messages %}\n"
    '    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or '
    '(message.role == "assistant" and not message.tool_calls) %}\n'
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    '    {%- elif message.role == "assistant" %}\n'
    "        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n"
    "            {{- '\\n' + message.content }}\n"
    "        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n"
    "            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n"
    "            {%- endif %}\n"
    '            {{- \'\\n<tool_call>\\n{"name": "\' }}\n'
    "            {{- tool_call.name }}\n"
    '            {{- \'", "arguments": \' }}\n'
    "            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n"
    "        {%- endfor %}\n"
    "        {{- '<|im_end|>\\n' }}\n"
    '    {%- elif message.role == "tool" %}\n'
    '        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}\n'
    "            {{- '<|im_start|>user' }}\n"
    "        {%- endif %}\n"
    "        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n"
    "        {{- '\\n</tool_response>' }}\n"
    '        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}\n'
    "            {{- '<|im_end|>\\n' }}\n"
    "        {%- endif %}\n"
    "    {%- endif %}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

#: How a reply's tool calls are parsed back (transformers' `response_template` format): the
#: Hermes form above. The same as TRL's for Qwen templates, kept here so that nothing
#: depends on TRL recognising the template's text.
RESPONSE_TEMPLATE: dict[str, Any] = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "reasoning_content": {"open": "<think>", "close_pattern": r"</think>\s*", "content": "text"},
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
    },
}


def with_tool_template(tokenizer: Any) -> Any:
    """`tokenizer` (a ChatML one: `<|im_start|>`/`<|im_end|>`) with `TOOL_CHAT_TEMPLATE` and the
    matching response template; returned for chaining. Other tokenizers are refused: their
    models never saw these tokens."""
    vocab = tokenizer.get_vocab()
    if "<|im_start|>" not in vocab or "<|im_end|>" not in vocab:
        raise ValueError(
            f"{type(tokenizer).__name__} has no ChatML tokens (<|im_start|>, <|im_end|>): give it a tool-calling "
            "chat template of its own family (trl.chat_template_utils has several)"
        )
    tokenizer.chat_template = TOOL_CHAT_TEMPLATE
    tokenizer.response_template = RESPONSE_TEMPLATE
    return tokenizer


__all__ = ["RESPONSE_TEMPLATE", "TOOL_CHAT_TEMPLATE", "with_tool_template"]
