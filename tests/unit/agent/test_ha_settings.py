"""Beyond one machine, as settings: a list of NATS URLs, Redis through Sentinel, stream replicas,
and the failover window counted as an outage. No server is reached here."""
from __future__ import annotations

import pytest
from pydantic import ValidationError
from redis.asyncio.sentinel import SentinelConnectionPool
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, ResponseError

from bke.adapters.bus.connect import BusAccess, connect_options, nats_servers
from bke.adapters.bus.streams import STREAMS
from bke.core.errors import is_unavailable
from bke.lab.ha_runtime import ha_env, stream_replicas
from bke.lab.nats_cluster import NatsNode, node_conf
from bke.lab.sentinel import ha_acl_lines
from bke.adapters.runtime import RuntimeInfo
from bke.adapters.settings import ServiceSettings
from bke.adapters.state.client import StoreAccess, parse_sentinels, redis_client

URL = "redis://bke-planner:s3cret@ignored:1/2"


def settings(**kw: object) -> ServiceSettings:
    return ServiceSettings(**{"nats_url": "nats://127.0.0.1:4222", "redis_url": URL, **kw})


def test_one_nats_url_or_a_comma_separated_list():
    assert nats_servers("nats://a:1") == ["nats://a:1"]
    assert nats_servers("nats://a:1, nats://b:2,tls://c:3") == ["nats://a:1", "nats://b:2", "tls://c:3"]
    opts = connect_options(BusAccess("nats://a:1,nats://b:2"))
    assert opts["servers"] == ["nats://a:1", "nats://b:2"]
    assert "tls" not in opts
    assert "tls" in connect_options(BusAccess("nats://a:1,tls://b:2"))  # any TLS node: TLS for all


@pytest.mark.parametrize(("url", "why"), [("nats://a:1,,nats://b:2", "entry 2 of 3 is empty"),
                                           ("nats://a:1,", "entry 2 of 2 is empty"),
                                           ("nats://a:1,http://b:2", "entry 2 of 2 has an unknown scheme")])
def test_a_bad_nats_list_is_refused_naming_the_variable_and_entry(url, why):
    with pytest.raises(ValidationError) as err:
        settings(nats_url=url)
    assert "BKE_NATS_URL" in str(err.value) and why in str(err.value)


def test_sentinels_parse_and_bad_entries_name_the_variable():
    assert parse_sentinels("10.0.0.1:26379, [::1]:26380,s3:1") == (("10.0.0.1", 26379), ("::1", 26380), ("s3", 1))
    for bad, why in [("h1:26379,h2", "entry 2 ('h2') is not host:port"), (":26379", "is not host:port"),
                     ("h:0", "port must be a number"), ("h:http", "port must be a number"), ("h:1,", "entry 2")]:
        with pytest.raises(ValueError, match="BKE_REDIS_SENTINELS") as err:
            parse_sentinels(bad)
        assert why in str(err.value)


def test_sentinel_settings_go_in_pairs_and_make_the_store():
    with pytest.raises(ValidationError, match="BKE_REDIS_SENTINELS and BKE_REDIS_SENTINEL_MASTER go together"):
        settings(redis_sentinels="h:26379")
    with pytest.raises(ValidationError, match="BKE_REDIS_SENTINELS: entry 1"):
        settings(redis_sentinels="h", redis_sentinel_master="bke")
    store = settings(redis_sentinels="h1:1,h2:2", redis_sentinel_master="bke").store
    assert store.sentinels == (("h1", 1), ("h2", 2)) and store.sentinel_master == "bke"
    assert "s3cret" not in repr(store) and "h1:1,h2:2" in repr(store)
    assert settings().store.sentinels == ()


def test_env_names(monkeypatch):
    monkeypatch.setenv("BKE_NATS_URL", "nats://a:1,nats://b:2")
    monkeypatch.setenv("BKE_REDIS_URL", URL)
    monkeypatch.setenv("BKE_REDIS_SENTINELS", "h1:1")
    monkeypatch.setenv("BKE_REDIS_SENTINEL_MASTER", "bke")
    monkeypatch.setenv("BKE_STREAM_REPLICAS", "3")
    s = ServiceSettings()  # type: ignore[call-arg]
    assert s.bus.url == "nats://a:1,nats://b:2" and s.stream_replicas == 3 and s.store.sentinel_master == "bke"
    monkeypatch.setenv("BKE_STREAM_REPLICAS", "7")
    with pytest.raises(ValidationError, match="BKE_STREAM_REPLICAS"):
        ServiceSettings()  # type: ignore[call-arg]


async def test_a_sentinel_client_logs_in_as_the_urls_user_to_the_primary_the_sentinels_name():
    client = redis_client(StoreAccess(URL, sentinels=(("127.0.0.1", 1),), sentinel_master="bke"))
    pool = client.connection_pool
    assert isinstance(pool, SentinelConnectionPool) and pool.service_name == "bke" and pool.is_master
    kw = pool.connection_kwargs
    assert (kw["username"], kw["password"], kw["db"]) == ("bke-planner", "s3cret", 2)
    assert RedisConnectionError in kw["retry_on_error"]  # a pipeline after a failover is sent again
    # the sentinels are asked without the primary's password
    assert all(s.connection_pool.connection_kwargs.get("password") is None for s in pool.sentinel_manager.sentinels)
    await client.aclose()


def test_store_access_needs_both_sentinels_and_master():
    with pytest.raises(ValueError, match="both"):
        StoreAccess(URL, sentinels=(("h", 1),))


def test_the_failover_window_is_an_outage_not_a_failure():
    assert is_unavailable(ReadOnlyError("You can't write against a read only replica."))
    # a Lua script's write on a demoted primary: a plain script error carrying READONLY
    script = ResponseError("Error running script (call to f_1): @user_script:1: @user_script: 1: "
                           "-READONLY You can't write against a read only replica. ")
    assert is_unavailable(script)
    assert is_unavailable(ResponseError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."))
    assert not is_unavailable(ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"))
    assert not is_unavailable(ValueError("READONLY You can't write against a read only replica"))  # not Redis'


def test_stream_config_carries_replicas():
    assert {d.config(3).num_replicas for d in STREAMS} == {3}
    assert STREAMS[0].config().num_replicas == 1


def _info(nats: str, sentinels: str | None = None) -> RuntimeInfo:
    return RuntimeInfo(nats, URL, 1, 2, "http://m", None, sentinels, "bke" if sentinels else None)


def test_lab_env_for_a_cluster_and_sentinel():
    assert stream_replicas(_info("nats://a:1")) is None and ha_env(_info("nats://a:1")) == {}
    env = ha_env(_info("nats://a:1,nats://b:2,nats://c:3", "127.0.0.1:5,127.0.0.1:6"))
    assert env == {"BKE_STREAM_REPLICAS": "3", "BKE_REDIS_SENTINELS": "127.0.0.1:5,127.0.0.1:6",
                   "BKE_REDIS_SENTINEL_MASTER": "bke"}
    doc = _info("nats://a:1", "h:5").to_json()
    assert RuntimeInfo.from_json(doc).admin_store().sentinels == (("h", 5),)
    assert RuntimeInfo.from_json(_info("nats://a:1").to_json()).redis_sentinels is None


def test_each_node_routes_to_the_others_with_the_routes_password(tmp_path):
    nodes = [NatsNode(i, 4000 + i, 5000 + i, 6000 + i) for i in range(3)]
    conf = node_conf(nodes[1], nodes, tmp_path, "pw")
    assert "server_name: bke-n1" in conf and 'listen: "127.0.0.1:6001"' in conf
    assert "@127.0.0.1:6000" in conf and "@127.0.0.1:6002" in conf and "@127.0.0.1:6001" not in conf
    assert "bke-route:pw@" in conf


def test_replication_and_sentinel_users_hold_hashes_and_little_else():
    text = ha_acl_lines({"bke-replica": "p1", "bke-sentinel": "p2"})
    assert "p1" not in text.split() and ">p1" not in text and ">p2" not in text
    replica, sentinel = text.splitlines()
    assert replica.startswith("user bke-replica on #") and "+psync" in replica and "~" not in replica
    assert "&__sentinel__:hello" in sentinel and "+@all" not in sentinel and "~" not in sentinel


def test_agents_take_the_list_too():
    from bke.adapters.ssh.files import render_env
    from bke_agent.settings import AgentSettings

    urls = "nats://n1:4222,nats://n2:4222,nats://n3:4222"
    agent = AgentSettings(cluster="c", node="w1", nats_url=urls)
    assert connect_options(agent.bus)["servers"] == urls.split(",")
    assert f"BKE_NATS_URL={urls}" in render_env("c", "w1", urls)  # `bke agent bootstrap` writes it as is


def test_a_publish_no_stream_answered_is_an_outage():
    from nats.js.errors import NoStreamResponseError

    assert is_unavailable(NoStreamResponseError())  # a stream electing a leader after a node is lost


async def test_an_agent_sends_its_result_again_while_the_stream_elects_a_leader():
    from types import SimpleNamespace

    from nats.js.errors import NoStreamResponseError

    from bke.contracts.agent import CommandResult, StepResult
    from bke_agent.loop import AgentLoop

    class Js:
        def __init__(self, failures: list[Exception]):
            self.failures, self.sent = failures, 0

        async def publish(self, subject: str, data: bytes, headers: dict | None = None) -> None:
            self.sent += 1
            if self.failures:
                raise self.failures.pop(0)

    result = CommandResult(command_id="c1", cluster="c", node="n", agent_id="a", status="Succeeded",
                           steps=[StepResult(id="s", status="Succeeded")], started_at="t0", finished_at="t1")
    js = Js([NoStreamResponseError(), NoStreamResponseError()])
    me = SimpleNamespace(js=js, cluster="c", node="n", _ids={}, settings=SimpleNamespace(result_retry_s=10.0))
    await AgentLoop._publish_result(me, result)  # type: ignore[arg-type]
    assert js.sent == 3  # two refusals during the election, then stored
    me.js = js = Js([ValueError("a bug, not an outage")])
    with pytest.raises(ValueError):
        await AgentLoop._publish_result(me, result)  # type: ignore[arg-type]
    assert js.sent == 1  # handed back at once (redelivered), never retried here


async def test_an_agent_waits_for_its_ack_to_be_confirmed():
    from types import SimpleNamespace

    from nats.errors import NoRespondersError
    from nats.errors import TimeoutError as NatsTimeout

    from bke_agent.loop import AgentLoop

    class Msg:
        def __init__(self, failures: list[Exception]):
            self.failures, self.tries = failures, 0

        async def ack_sync(self, timeout: float = 1.0) -> None:
            self.tries += 1
            if self.failures:
                raise self.failures.pop(0)

    me = SimpleNamespace(_ids={}, settings=SimpleNamespace(result_retry_s=10.0))
    msg = Msg([NatsTimeout(), NoRespondersError()])  # lost while the consumer elects a leader
    await AgentLoop._ack(me, msg)  # type: ignore[arg-type]
    assert msg.tries == 3
    me.settings.result_retry_s = 0.0
    msg = Msg([NatsTimeout()] * 5)
    await AgentLoop._ack(me, msg)  # type: ignore[arg-type]  # never confirmed: left to the journal
    assert msg.tries == 1
