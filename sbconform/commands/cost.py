"""sbconform cost: what the syphon and the backlog queues cost, from the model (PAIR-SYPH-005, PAIR-COST-001).

Receive calls: an idle syphon over N empty backlog queues (all entities available), run on
the model's clock for an hour, a day and D days. Operations per message: one message sent
while its entity is down, moved by the syphon once it is back and received there, on two
in-process reference namespaces, with every operation metered.
"""

from __future__ import annotations

import argparse
import sys

from ..argtypes import whole

#: the model runs every long poll of every backlog queue, and its time and memory grow with
#: queues x days (about 7 s and 350 MB for 1,000 queues over 30 days): a bound that finishes
MAX_QUEUE_DAYS = 50_000

LABELS = {
    ("secondary", "send"): "send to the backlog queue",
    ("secondary", "receive"): "receive from the backlog queue",
    ("primary", "send"): "send to the primary entity",
    ("primary", "receive"): "receive from the primary entity",
}


#: a whole number >= 1 (generate and replay take theirs with it too)
positive = whole(1)


def run(args: argparse.Namespace) -> int:
    from sbreference import DAY, HOUR, MINUTE
    from sbreference.paired import LONG_POLL, idle_receive_calls

    from ..paired import operations_per_moved_message
    from ..targets.reference import ReferenceTarget

    n, days = args.backlog_queues, args.days
    if n * (days + 1) > MAX_QUEUE_DAYS:  # the day's figure is a run of its own
        print(f"sbconform cost: --backlog-queues {n:,} over --days {days:,}: {n * (days + 1):,} queue-days for the model "
              f"to run; at most {MAX_QUEUE_DAYS:,} (e.g. {MAX_QUEUE_DAYS // (days + 1):,} queues over {days} days): "
              f"fewer queues or days", file=sys.stderr)
        return 2
    print(f"backlog queues: {n} (all entities available, syphon long polls of {LONG_POLL // MINUTE} minutes)")
    print(f"receive calls per hour: {idle_receive_calls(n, HOUR)}")
    print(f"receive calls per day: {idle_receive_calls(n, DAY)}")
    print(f"receive calls in {days} day{'s' if days != 1 else ''}: {idle_receive_calls(n, days * DAY)}")
    operations = operations_per_moved_message(ReferenceTarget(), ReferenceTarget())
    print(f"billed operations per message moved through a backlog queue: {len(operations)}")
    for number, op in enumerate(operations, 1):
        print(f"  {number}. {LABELS[(op.role, op.kind)]}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("cost", help="paired namespaces: syphon receive calls and operations per moved message, from the model")
    p.add_argument("--backlog-queues", type=whole(1, MAX_QUEUE_DAYS // 2, " (the model runs every queue's polls)"), required=True,
                   metavar="N", help="number of backlog queues")
    p.add_argument("--days", type=whole(1, MAX_QUEUE_DAYS // 2, " (the model runs every day's polls)"), default=30, metavar="D", help="period for the total (default 30 days)")
    p.set_defaults(func=run)
