"""The fleet router over three real `envharness serve echo` processes on loopback, no Ray.

One server is SIGKILLed mid-batch: its episodes fail as infrastructure failures (env_mask
zeroed, counted apart from reward 0), the others finish with their real rewards, new
sessions avoid it, and it rejoins once restarted on the same port.
"""

from __future__ import annotations

import concurrent.futures
import os
import signal
import threading
import time
from urllib.parse import urlparse

import pytest
from conftest import wait_until

from envharness.core.launchers import launch_local
from envharness.envs.echo.client import AsyncEchoEnv
from envharness.envs.echo.models import EchoAction
from envharness.eval.stats import format_table, summarize
from envharness.fleet import FleetRouter, NoServerAvailableError, ServerLostError
from envharness.harness import (
    HarnessRunLimits,
    LLMResponse,
    ModelStepResult,
    ResourceSessionFactory,
    StepEnvSessionAdapter,
    ToolCall,
    run_coroutine_sync,
    run_episodes,
    tool_spec,
)
from envharness.harness.failures import is_infra_failure
from envharness.harness.records import record_from_result
from envharness.harness.rollout import build_harness_rollout_func, rollout_metrics

ECHO_TOOL = tool_spec("echo", "Echo a message back.", {"message": {"type": "string"}}, ["message"])
TURNS = 6


class EchoFleetSessions(ResourceSessionFactory):
    """Echo sessions on fleet leases; remembers which server each episode started on."""

    def __init__(self, router: FleetRouter):
        self.router = router
        self.server_of: dict[str, str] = {}
        self.server_of_task: dict[str, str] = {}
        #: The servers the router counted healthy when each episode asked for one.
        self.healthy_then: dict[str, list[str]] = {}

    def create(self, task, seed=None, episode_id=None):
        self.healthy_then[episode_id] = list(self.router.healthy_urls())
        lease = self.router()
        session = StepEnvSessionAdapter(
            lease,
            task=task,
            seed=seed,
            episode_id=episode_id,
            tool_specs=[ECHO_TOOL],
            action_builder=lambda name, args: EchoAction(message=args["message"]),
            initial_messages_builder=lambda result, task: [{"role": "user", "content": f"Say: {task}"}],
        )
        self.server_of[episode_id] = lease.url
        self.server_of_task[task] = lease.url
        return session


class KillMidEpisode:
    """A model step that holds the victim's episodes two steps in until the victim is killed, so
    the kill lands mid-episode however fast or slow the machine is."""

    def __init__(self, factory: EchoFleetSessions, victim) -> None:
        self.factory, self.victim = factory, victim
        self.holding, self.killed = threading.Event(), threading.Event()

    def __call__(self, messages, tools, sampling):
        word = messages[0]["content"].removeprefix("Say: ")
        turn = sum(1 for m in messages if m["role"] == "assistant")
        if turn >= 2 and self.factory.server_of_task.get(word) == self.victim.base_url:
            self.holding.set()
            assert self.killed.wait(120), "the victim was never killed"
        return slow_say(messages, tools, sampling)

    def kill_when_held(self) -> None:
        if self.holding.wait(120):
            os.kill(self.victim.process.pid, signal.SIGKILL)
            self.victim.process.wait(60)
        self.killed.set()  # (also when nothing was held: the test then fails on its assertions)


def slow_say(messages, tools, sampling):
    """Say the task word (1 char: reward 0.1) each turn, slowly, so a batch is mid-way long enough."""
    time.sleep(0.15)
    word = messages[0]["content"].removeprefix("Say: ")
    turn = sum(1 for m in messages if m["role"] == "assistant")
    return ModelStepResult(
        response=LLMResponse(
            content=word, tool_calls=[ToolCall(id=f"c{turn}", name="echo", args={"message": word})]
        ),
        prompt_ids=[1, 2],
        completion_ids=[3, 4],
        logprobs=[-0.5, -0.5],
    )


def start_server(port: int = 0):
    return launch_local("echo", server_args=["--max-sessions", "4", "--port", str(port)])


@pytest.fixture(scope="module")
def server_pool():
    """Three servers for the module; a test that kills one leaves it to be revived on its port."""
    with concurrent.futures.ThreadPoolExecutor(3) as pool:  # they start side by side
        servers = list(pool.map(lambda _: start_server(), range(3)))
    try:
        yield servers
    finally:
        for s in servers:
            s.stop()
        for s in servers:  # nothing this module started is left
            assert s.process.poll() is not None


@pytest.fixture
def three_servers(server_pool):
    def revive(i: int) -> None:
        if server_pool[i].process.poll() is not None:
            server_pool[i] = start_server(urlparse(server_pool[i].base_url).port)

    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        list(pool.map(revive, range(3)))
    yield server_pool


#: One-letter task words (reward 0.1 a step), one per episode, so a model step knows its episode.
WORDS = "abcdefghijklmnopqrstuvwxyz"


def run_batch(factory: EchoFleetSessions, n: int, concurrency: int, model_step=slow_say):
    return run_coroutine_sync(
        run_episodes(
            factory,
            list(WORDS[:n]),
            model_step=model_step,
            limits=HarnessRunLimits(max_turns=TURNS),
            max_concurrency=concurrency,
            episode_ids=[f"e{i}" for i in range(n)],
        )
    )


def test_new_sessions_go_to_the_least_loaded_server_and_stay_there(three_servers):
    urls = [s.base_url for s in three_servers]
    with FleetRouter(urls, client_class=AsyncEchoEnv, poll_interval_s=0.2) as router:
        router.wait_ready(timeout_s=30)
        assert router.capacity == 12
        leases = [router() for _ in range(6)]
        for lease in leases:
            lease.reset()
        placed = [lease.url for lease in leases]
        assert sorted(placed.count(u) for u in urls) == [2, 2, 2]
        for lease in leases:  # a session stays on its server
            before = lease.url
            assert lease.step(EchoAction(message="hi")).reward == pytest.approx(0.2)
            assert lease.url == before
        wait_until(lambda: sum(s.active_sessions for s in router.servers()) == 6, timeout_s=30)
        for lease in leases:
            lease.close()
        # sessions are pooled: the next episodes reuse them instead of opening new ones
        again = [router() for _ in range(6)]
        for lease in again:
            lease.reset()
        assert sorted(lease.url for lease in again) == sorted(placed)
        for lease in again:
            lease.close()
        assert sum(s.idle for s in router.servers()) == 6


def test_a_server_killed_mid_batch_fails_only_its_episodes_as_infrastructure(three_servers):
    urls = [s.base_url for s in three_servers]
    victim = three_servers[1]
    with FleetRouter(urls, client_class=AsyncEchoEnv, poll_interval_s=0.2) as router:
        router.wait_ready(timeout_s=30)
        factory = EchoFleetSessions(router)
        step = KillMidEpisode(factory, victim)
        killer = threading.Thread(target=step.kill_when_held)
        killer.start()
        results = run_batch(factory, n=18, concurrency=6, model_step=step)
        killer.join(timeout=180)
        assert step.holding.is_set(), "the victim server never got episodes"

        failed = [r for r in results if r.error is not None]
        assert failed, "the killed server's in-flight episodes must fail"
        for r in failed:  # only the victim's episodes, each flagged as an infrastructure failure
            assert factory.server_of[r.episode_id] == victim.base_url
            assert is_infra_failure(r) and "ServerLostError" in r.error, r.error
            assert record_from_result(r).metrics["infra_failure"] is True
        for r in results:
            if r.error is None:  # the others finish with their real reward (0.1 per step)
                assert r.env_reward == pytest.approx(0.1) and len(r.tool_trace) == TURNS
                if victim.base_url not in factory.healthy_then[r.episode_id]:  # known dead: avoided
                    assert factory.server_of[r.episode_id] != victim.base_url
        assert rollout_metrics(results)["infra_failures"] == len(failed)
        assert victim.base_url not in router.healthy_urls()

        # it rejoins after a restart on the same port, and takes sessions again
        port = urlparse(victim.base_url).port
        three_servers[1] = start_server(port)
        wait_until(lambda: victim.base_url in router.healthy_urls(), timeout_s=30)
        factory.server_of.clear()
        again = run_batch(factory, n=9, concurrency=9)
        assert all(r.error is None for r in again)
        assert victim.base_url in factory.server_of.values()


def test_rollout_func_masks_and_counts_infrastructure_failures(three_servers):
    urls = [s.base_url for s in three_servers]
    with FleetRouter(urls, client_class=AsyncEchoEnv, poll_interval_s=0.2) as router:
        router.wait_ready(timeout_s=30)
        factory = EchoFleetSessions(router)
        victim = three_servers[0]
        step = KillMidEpisode(factory, victim)  # the kill lands once a victim's episode is two steps in
        killer = threading.Thread(target=step.kill_when_held)
        killer.start()
        rollout_func = build_harness_rollout_func(
            session_factory=factory,
            model_step_builder=lambda trainer, session: step,
            limits=HarnessRunLimits(max_turns=TURNS),
            max_concurrency=6,
        )
        out = rollout_func(list(WORDS[:6]), None)
        killer.join(timeout=180)
        infra = [bool(m.get("infra_failure")) for m in out["verify_metrics"]]
        assert any(infra) and not all(infra)
        for flagged, mask, reward in zip(infra, out["env_mask"], out["env_reward"]):
            assert (set(mask) == {0}) if flagged else (1 in mask)
            assert reward == (0.0 if flagged else pytest.approx(0.1))
        assert rollout_func.last_metrics["infra_failures"] == sum(infra)


def test_a_reset_on_a_dead_server_retries_on_another(three_servers):
    urls = [s.base_url for s in three_servers]
    # polls far apart: the router still believes the killed server is healthy
    with FleetRouter(urls, client_class=AsyncEchoEnv, poll_interval_s=60) as router:
        router.wait_ready(timeout_s=30)
        first = min(urls)  # with equal loads the router picks servers in url order
        victim = next(s for s in three_servers if s.base_url == first)
        os.kill(victim.process.pid, signal.SIGKILL)
        victim.process.wait(10)
        lease = router()
        assert lease.reset().observation.echoed_message == "Echo environment ready!"
        assert lease.url != first
        assert first not in router.healthy_urls()
        lease.close()


def test_no_server_left_fails_fast_with_a_clear_error(three_servers):
    urls = [s.base_url for s in three_servers]
    with FleetRouter(urls, client_class=AsyncEchoEnv, poll_interval_s=0.1, acquire_timeout_s=1.0) as router:
        router.wait_ready(timeout_s=30)
        lease = router()
        lease.reset()
        for s in three_servers:
            s.process.kill()
            s.process.wait(10)
        with pytest.raises(ServerLostError, match="lost mid-episode"):
            lease.step(EchoAction(message="hi"))
        wait_until(lambda: not router.healthy_urls(), timeout_s=30)
        with pytest.raises(NoServerAvailableError, match="no healthy environment server"):
            router().reset()


def test_a_hung_server_is_taken_out_and_rejoins_when_it_answers_again(three_servers):
    urls = [s.base_url for s in three_servers]
    hung = three_servers[2]
    with FleetRouter(urls, client_class=AsyncEchoEnv, poll_interval_s=0.2, health_timeout_s=0.5) as router:
        router.wait_ready(timeout_s=30)
        os.kill(hung.process.pid, signal.SIGSTOP)  # alive, but answers nothing
        try:
            wait_until(lambda: hung.base_url not in router.healthy_urls(), timeout_s=30)
            leases = [router() for _ in range(4)]
            for lease in leases:
                lease.reset()
            assert hung.base_url not in {lease.url for lease in leases}
        finally:
            os.kill(hung.process.pid, signal.SIGCONT)
        wait_until(lambda: hung.base_url in router.healthy_urls(), timeout_s=30)
        for lease in leases:
            lease.close()


def test_eval_tables_leave_infrastructure_failures_unscored():
    records = [
        {"task": "a", "env_reward": 1.0},
        {"task": "a", "env_reward": 0.0},
        {
            "task": "a",
            "env_reward": 0.0,
            "error": "ServerLostError: gone",
            "metrics": {"infra_failure": True},
        },
        {"task": "b", "env_reward": 0.0, "error": "ValueError: model"},
    ]
    a, b, total = summarize(records, ["a", "b"])
    assert (a.episodes, a.successes, a.success_rate, a.errors, a.infra_failures) == (2, 1, 0.5, 0, 1)
    assert (b.episodes, b.errors, b.infra_failures) == (1, 1, 0)
    assert (total.episodes, total.infra_failures) == (3, 1)
    assert format_table([a, b, total]).splitlines()[0].split()[-1] == "infra"
    assert "infra" not in format_table(summarize(records[:2]))  # no lost server: the usual table
