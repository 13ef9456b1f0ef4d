"""A subject that several services consume must not be in a work-queue stream: JetStream
allows one consumer per subject there ("filtered consumer not unique on workqueue stream"), so
the second service to start would crash."""
from bke.adapters.bus.streams import STREAMS
from bke.contracts import CHANNELS
from nats.js.api import RetentionPolicy


def _stream_of(subject: str) -> str | None:
    for d in STREAMS:
        for pattern in d.subjects:
            p, s = pattern.split("."), subject.split(".")
            if (p[-1] == ">" and s[: len(p) - 1] == p[:-1] or len(p) == len(s)) and all(
                    a in ("*", ">") or a == b for a, b in zip(p, s)):
                return d.name
    return None


def test_a_subject_of_several_consuming_services_is_not_in_a_work_queue():
    work_queues = {d.name for d in STREAMS if d.retention == RetentionPolicy.WORK_QUEUE}
    for ch in CHANNELS:
        services = [r for r in ch.receivers if r in ("planner", "certs", "renderer", "dispatcher", "upgrader")]
        if ch.kind == "request" or len(services) < 2:
            continue
        subject = ch.subject.replace("{cluster}", "c").replace("{node}", "n")
        assert _stream_of(subject) not in work_queues, f"{ch.subject}: consumed by {services} in a work queue"


def test_each_channel_is_kept_in_the_stream_its_row_names():
    """The streams' subjects come from the channel rows (`Channel.stream`): a subject lands in
    the stream its row says, and a channel kept nowhere matches no stream."""
    streams = {"commands": "BKE_COMMANDS", "events": "BKE_EVENTS", "agent-commands": "BKE_AGENT",
               "agent-outputs": "BKE_AGENT_OUT", "dead-letters": "BKE_DEADLETTER", "": None}
    for ch in CHANNELS:
        subject = ch.subject.replace("{cluster}", "c").replace("{node}", "n").replace("{service}", "planner")
        assert _stream_of(subject) == streams[ch.stream], ch.subject
