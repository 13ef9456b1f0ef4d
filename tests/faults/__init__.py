"""Fault tests (outages, state loss, poison and floods, duplicates): real NATS, Redis and services, stopped, killed,
emptied and flooded on purpose. Each test that stops a server has a runtime of its own (conftest.py).

    .venv/bin/python -m pytest tests/faults               # every scenario, the soaks too
    .venv/bin/python -m pytest tests/faults -m "not soak" # what .ci/run runs

| scenario                                                   | test                                   |
|------------------------------------------------------------|----------------------------------------|
| Redis stopped 12 s / 75 s (soak) while etcd results arrive | test_redis_outage                      |
| dispatcher SIGKILLed holding results, restarted            | test_service_killed                    |
| NATS stopped 5 s / 70 s (soak) mid-install                 | test_nats_outage                       |
| the CLI with NATS down; follow through a Redis outage      | test_cli_outage, test_cli_follow       |
| unknown cluster's result, forged heartbeats, result floods | test_poison                            |
| a handler longer than the ack wait; old durables updated   | test_consumer_acks                     |
| results duplicated and reordered, service events twice     | test_duplicates                        |
| each service and an agent SIGKILLed at points of a lab install (every point: soak) | test_kills   |
| Redis emptied mid-install; restore; a start-over refused   | test_state_loss                        |
"""
