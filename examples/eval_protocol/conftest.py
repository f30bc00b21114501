"""Keep Eval Protocol offline when this example runs under pytest.

Without these, eval-protocol 0.3.33 would upload results to Fireworks (`EP_NO_UPLOAD`),
or open a browser tab on its logs UI (`EP_DISABLE_AUTO_BROWSER`). Each is only a default:
set the variable to override. One setting cannot live here: eval-protocol's pytest plugin
imports LiteLLM when pytest starts, before any conftest, and LiteLLM then fetches its model
price list from GitHub unless `LITELLM_LOCAL_MODEL_COST_MAP=True` is already in the
environment (`make test` sets it).
Eval Protocol's local log (`~/.eval_protocol/logs.db`, read by `ep logs`) stays where it
is; run with another `HOME` to keep it elsewhere, as tests/test_eval_protocol.py does.
"""

import os

for _name, _value in {
    "EP_NO_UPLOAD": "1",
    "EP_DISABLE_AUTO_BROWSER": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}.items():
    os.environ.setdefault(_name, _value)
