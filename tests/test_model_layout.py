"""The settlement store's data layout (#20): lanes hold the message records themselves, and a
clone's lanes hold the clone's records, never the original's."""

from __future__ import annotations

from sbreference import Message
from sbreference.message import ACTIVE, LOCKED, StoredMessage
from sbreference.store import PEEK_LOCK, MessageStore


def _store() -> MessageStore:
    dlq = MessageStore("q/$DeadLetterQueue", 1_000, 10, is_dead_letter=True)
    return MessageStore("q", 1_000, 10, dead_letter=dlq)


def test_a_clone_receives_its_own_records_and_leaves_the_original_as_it_was() -> None:
    store = _store()
    for seq in (1, 2, 3):
        store.enqueue(StoredMessage(Message(b"x", message_id=f"m{seq}"), seq, 0, 10_000 if seq == 2 else 1 << 62, 70))
    (first,) = store.receive(0, 1, 1, PEEK_LOCK)
    store.abandon(0, 1, first.lock_token)  # back to the head (SETTLE-LOCK-006): in the lane's returned heap
    copy = store.clone()
    got = copy.receive(0, 2, 3, PEEK_LOCK)
    assert [d.sequence_number for d in got] == [1, 2, 3]
    assert all(copy.messages[d.sequence_number].lock_token == d.lock_token for d in got)
    assert all(msg.state is LOCKED for msg in copy.messages.values())
    assert all(msg.state is ACTIVE and msg.lock_token is None for msg in store.messages.values())
    # the original still hands out all three, in order, and message 2 expires from the middle of its lane
    (head,) = store.receive(0, 1, 1, PEEK_LOCK)
    assert head.sequence_number == 1 and head.delivery_count == 2
    assert [d.sequence_number for d in store.receive(20_000, 1, 5, PEEK_LOCK)] == [1, 3]  # its lock expired; 2 expired
    assert [d.sequence_number for d in copy.receive(20_000, 2, 5, PEEK_LOCK)] == [1, 3]  # its locks expired; 2 expired


def test_a_message_measures_the_same_whether_its_size_was_kept_or_not() -> None:
    from sbreference.message import measured_as_sent, message_size

    plain = Message(b"abc", message_id="id")
    with_properties = Message(b"", application_properties={"k": "vv"}, subject="é")
    assert [message_size(plain), message_size(plain)] == [64 + 3 + 2] * 2
    assert [message_size(with_properties), message_size(with_properties)] == [64 + 1 + 2 + 2] * 2  # 'é': 2 bytes of UTF-8
    assert message_size(measured_as_sent(Message(b"x"), 500)) == 500  # the transport's size, when larger
    assert message_size(measured_as_sent(Message(b"x" * 600), 500)) == 64 + 600
