"""How agents play echo, derived from its environment class (`define_environment`): one tool,
`echo(message)`, a reply read as the message, and a scripted policy that wins (a message of
ten characters or more earns the full reward)."""

from envharness.envs.echo.environment import EchoEnvironment
from envharness.harness.define import define_environment


def say_hello(messages: list[dict]) -> str:
    return "hello, world"


SPEC = define_environment(EchoEnvironment, scripted_policy=say_hello)
