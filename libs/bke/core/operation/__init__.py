"""One frame for the operations on a running cluster (certificate rotation, reset and delete,
join, removal): a typed record with its node runs, the answers folded into it, and a pure
`decide` that returns one `Decision`. The loop that carries the decisions out, under a lease and
the cluster's operation slot, is bke.adapters.operation; each operation adds only its decide, its
carriers, its start and its view."""
from bke.contracts.statuses import OperationStatus, RunStatus

from .decision import WAIT_S, Act, Decision, Fail, RunLocally, Send, Succeed, Wait, failed_node
from .fold import INPUT_PREFIX, STDERR_KEEP, Answer, Answers, ServiceAnswer, fold, in_flight, settle, settle_in_flight
from .record import NodeProgress, NodeRun, OperationRecord, Record, StepRun

__all__ = [
    "Act",
    "Answer",
    "Answers",
    "Decision",
    "Fail",
    "INPUT_PREFIX",
    "NodeProgress",
    "NodeRun",
    "OperationRecord",
    "OperationStatus",
    "Record",
    "RunLocally",
    "RunStatus",
    "STDERR_KEEP",
    "Send",
    "ServiceAnswer",
    "StepRun",
    "Succeed",
    "WAIT_S",
    "Wait",
    "failed_node",
    "fold",
    "in_flight",
    "settle",
    "settle_in_flight",
]
