"""The transaction coordinator of ``sbconform serve``: AMQP 1.0 transactions over the model's
coordinator (sbreference/transactions.py), as Service Bus speaks them.

Wire facts (sbspec/wire.md, section 7 "Transactions"; sources: Microsoft's "AMQP 1.0 in Azure Service Bus and
Event Hubs protocol guide", section Transactions and Send-via; OASIS AMQP 1.0 part 4):

- A controller attaches a sending link whose target is a ``coordinator`` (AMQP type 0x30); on it it
  transfers ``declare`` (descriptor 0x31) and ``discharge`` (0x32: txn-id, fail) messages, each an
  AmqpValue body. A declare is answered with the ``declared`` outcome (0x33) carrying the txn-id;
  a discharge with ``accepted``, or ``rejected`` with a ``transaction-error`` condition
  (``amqp:transaction:unknown-id``, ``amqp:transaction:rollback``, ``amqp:transaction:timeout``).
  ``fail=true`` rolls back.
- Transactional work carries ``transactional-state`` (0x34: txn-id, outcome): on a transfer it
  enlists a send; on a disposition it enlists a settlement (accepted = complete, modified =
  abandon or, with undeliverable-here, defer, rejected = dead-letter). The broker answers with a
  ``transactional-state`` holding the outcome it applied.
- Send via: a sender attaches to the via (transfer) entity with the link property
  ``com.microsoft:transfer-destination-address`` naming the destination.

python-qpid-proton exposes both: ``Delivery.remote_state == 0x34`` with ``remote.data ==
[txn-id, outcome]``; our answers set ``local.data`` and ``update(code)``.
"""

from __future__ import annotations

from typing import Any

from proton import Data, Delivery, Described, Link, Message, Terminus, symbol, ulong

from sbreference import ErrorCode, ServiceBusError

from . import values as v

DECLARE, DISCHARGE, DECLARED, TRANSACTIONAL_STATE = 0x31, 0x32, 0x33, 0x34
ACCEPTED, REJECTED, RELEASED, MODIFIED = 0x24, 0x25, 0x26, 0x27
DESCRIPTORS: dict = {
    **{code: code for code in (DECLARE, DISCHARGE, ACCEPTED, REJECTED, RELEASED, MODIFIED)},
    "amqp:declare:list": DECLARE,
    "amqp:discharge:list": DISCHARGE,
    "amqp:accepted:list": ACCEPTED,
    "amqp:rejected:list": REJECTED,
    "amqp:released:list": RELEASED,
    "amqp:modified:list": MODIFIED,
}
TRANSFER_DESTINATION = symbol("com.microsoft:transfer-destination-address")
LOCAL_TRANSACTIONS = "amqp:local-transactions"


def is_coordinator(link: Link) -> bool:
    return link.is_receiver and link.remote_target.type == Terminus.COORDINATOR


def descriptor(value: Any) -> Any:
    """0x31 or symbol('amqp:declare:list') -> 0x31; anything else -> None."""
    if isinstance(value, (int, ulong)):
        return DESCRIPTORS.get(int(value))
    return DESCRIPTORS.get(str(value)) if value is not None else None


def txn_bytes(txn_id: int) -> bytes:
    return int(txn_id).to_bytes(8, "big")


def txn_number(raw: Any) -> int:
    """A txn-id from the wire as the model's number; anything we never issued maps to -1 (unknown).
    A txn-id is binary: anything else (an integer would make ``bytes()`` allocate that many) is unknown."""
    if not isinstance(raw, (bytes, bytearray, memoryview)):
        return -1
    data = bytes(raw)
    return int.from_bytes(data, "big") if len(data) == 8 else -1


def transactional(dlv: Delivery) -> tuple[int, Any] | None:
    """(txn number, outcome) if the peer's state on this delivery is transactional, else None."""
    if dlv.remote_state != TRANSACTIONAL_STATE:
        return None
    try:
        data = list(dlv.remote.data or [])
    except UnicodeDecodeError:  # a string that is not UTF-8 in it (AMQP 1.0 part 1, 1.6.20): no transaction, no outcome
        return (-1, None)
    if not data:
        return (-1, None)
    return txn_number(data[0]), (data[1] if len(data) > 1 else None)


def settlement_of(outcome: Any) -> tuple[str, str | None, str | None]:
    """A transactional-state's outcome as a model settlement: (kind, reason, description)."""
    if not isinstance(outcome, Described):
        raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"a transactional disposition needs an outcome, got {outcome!r}")
    code = descriptor(outcome.descriptor)
    if not isinstance(outcome.value or [], list):  # an outcome is a described list (AMQP 1.0 part 3, 3.4)
        raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"outcome {outcome.descriptor!r} is not a list of fields")
    fields = list(outcome.value or [])
    if code == ACCEPTED:
        return "complete", None, None
    if code == MODIFIED:
        undeliverable = len(fields) > 1 and bool(fields[1])
        if len(fields) > 2 and fields[2]:
            raise no_properties_in_a_transaction()
        return ("defer" if undeliverable else "abandon"), None, None
    if code == REJECTED:
        info: dict = {}
        error = fields[0] if fields else None
        if isinstance(error, Described) and isinstance(error.value, list) and len(error.value) > 2 and isinstance(error.value[2], dict):
            info = {str(k): v for k, v in error.value[2].items()}
        if set(info) - {"DeadLetterReason", "DeadLetterErrorDescription"}:
            raise no_properties_in_a_transaction()
        return "dead_letter", _opt_str(info.get("DeadLetterReason")), _opt_str(info.get("DeadLetterErrorDescription"))
    raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, f"outcome {outcome.descriptor!r} cannot be part of a transaction")


#: SETTLE-MOD-001 in a transaction: refused, never dropped (the model's transactions take no properties)
def no_properties_in_a_transaction() -> ServiceBusError:
    return ServiceBusError(ErrorCode.ARGUMENT_ERROR, "properties to modify inside a transaction are not supported by "
                           "this broker (sbconform serve)", transient=False)


def _opt_str(value: Any) -> str | None:
    return None if value is None else str(value)


def answer_transactional(dlv: Delivery, txn_id: int, outcome_code: int = ACCEPTED) -> None:
    """Answer a transactional transfer or disposition with transactional-state(txn-id, outcome)."""
    dlv.local.data = [txn_bytes(txn_id), Described(ulong(outcome_code), [])]
    dlv.update(TRANSACTIONAL_STATE)
    dlv.settle()


def control(namespace: Any, conn: int, data: bytes, dlv: Delivery, condition: Any) -> None:
    """A transfer on the coordinator link: declare or discharge; answered and settled here.
    ``condition(error)`` builds the AMQP condition of a model error."""
    try:
        request = Message()
        request.decode(data)
        body = request.body
        code = descriptor(body.descriptor) if isinstance(body, Described) else None
        if code == DECLARE:
            txn_id = namespace.transactions.declare(conn)
            dlv.local.data = [txn_bytes(txn_id)]
            dlv.update(DECLARED)
            dlv.settle()
            return
        if code == DISCHARGE:
            fields = list(body.value or [])
            txn = txn_number(fields[0]) if fields else -1
            fail = bool(fields[1]) if len(fields) > 1 else False
            namespace.transactions.discharge(conn, txn, fail)
            dlv.update(Delivery.ACCEPTED)
            dlv.settle()
            return
        raise ServiceBusError(ErrorCode.ARGUMENT_ERROR, "the coordinator accepts declare and discharge only")
    except ServiceBusError as error:
        dlv.local.condition = condition(error)
    except Exception as error:  # an undecodable control message is the peer's mistake, not ours
        dlv.local.condition = v.error("amqp:decode-error", f"the control message could not be decoded: {error}")
    dlv.update(Delivery.REJECTED)
    dlv.settle()


def open_coordinator(link: Link) -> None:
    """Accept the coordinator link: its target echoed, local transactions offered (the server
    grants its credit)."""
    link.source.copy(link.remote_source)
    link.target.type = Terminus.COORDINATOR
    link.target.capabilities.put_array(False, Data.SYMBOL)
    link.target.capabilities.enter()
    link.target.capabilities.put_symbol(LOCAL_TRANSACTIONS)
    link.target.capabilities.exit()
    link.open()


def remote_properties(link: Link) -> dict:
    """The properties of the client's ATTACH: a map (fields, AMQP 1.0 part 2, 2.7.3); anything
    else reads as none."""
    props = link.remote_properties
    return props if isinstance(props, dict) else {}


def destination_of(link: Link) -> str | None:
    """The send-via destination a sender named on its link, if any."""
    props = remote_properties(link)
    value = props.get(TRANSFER_DESTINATION)
    return None if value is None else str(value)
