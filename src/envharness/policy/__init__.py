"""A policy endpoint for agents that own their loop: OpenAI's chat completions from any
`ModelBackend`, every call recorded per rollout with its exact tokens, and the recorded
rollouts turned into GRPO samples (`docs/policy_endpoint.md`).

    traces.py    Turn / RolloutTrace / TraceStore: what is recorded
    forks.py     which earlier tokens a request continues; forks when it continues none
    samples.py   a trace as one GRPO sample (harness/tokens.py), or OpenEnv TrainingTrace entries
    wire.py      the OpenAI request/reply; errors.py  OpenAI-style refusals; images.py  image_url parts
    endpoint.py  PolicyEndpoint.complete: validate, continue, sample (batched), record
    app.py       the HTTP routes; server.py  PolicyServer: the app on loopback in a thread
    agents.py    run_agent: one rollout of an agent that owns its loop; the reward from the env's /mcp
"""

from envharness.policy.endpoint import PolicyEndpoint
from envharness.policy.errors import PolicyError
from envharness.policy.samples import TraceSample, trace_sample, training_trace_entries
from envharness.policy.traces import RolloutTrace, TraceStore, Turn

__all__ = [
    "PolicyEndpoint",
    "PolicyError",
    "RolloutTrace",
    "TraceSample",
    "TraceStore",
    "Turn",
    "trace_sample",
    "training_trace_entries",
    "PolicyServer",
]


def __getattr__(name: str):  # the server pulls in uvicorn and the app only when asked for
    if name == "PolicyServer":
        from envharness.policy.server import PolicyServer

        return PolicyServer
    raise AttributeError(name)
