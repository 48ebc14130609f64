@needs:transactions
Feature: Transactions
  A transaction groups sends and settlements made on one connection: they take effect together when
  it commits, and not at all when it is rolled back, times out or its connection goes away.
  Receives are not part of a transaction: a client receives in peek-lock mode, then settles inside one.

  @TXN-VIS-001
  Scenario: Messages sent in a transaction appear only when it commits
    Given a queue "q"
    And client "C" declares transaction "T"
    When transaction "T" sends "m1", "m2" to "q"
    Then peeking "q" shows nothing
    And receiver "R" on "q" receives 1 message
    And receiver "R" got no message
    When transaction "T" is committed
    Then the operation succeeds
    And peeking "q" shows "m1", "m2"

  @TXN-VIS-002 @TXN-OPS-001
  Scenario: A completion in a transaction takes effect at the commit, and the message stays locked until then
    Given a queue "q" with lock duration 30 seconds
    And message "m1" is sent to "q"
    And client "C" receives 1 message from "q"
    And client "C" declares transaction "T"
    When transaction "T" completes "m1"
    Then the operation succeeds
    And peeking "q" shows "m1"
    And receiver "R" on "q" receives 1 message
    And receiver "R" got no message
    When transaction "T" is committed
    Then the operation succeeds
    And peeking "q" shows nothing

  @TXN-OPS-001
  Scenario: Abandon, defer and dead-letter in one committed transaction
    Given a queue "q" with lock duration 30 seconds
    And messages "a", "b", "c" are sent to "q"
    And client "C" receives 3 messages from "q"
    And client "C" declares transaction "T"
    When transaction "T" abandons "a"
    And transaction "T" defers "b"
    And transaction "T" dead-letters "c"
    And transaction "T" is committed
    Then the operation succeeds
    And peeking "q" shows "a", "b"
    And peeking "q" shows "b" in state "deferred"
    And peeking "q/$DeadLetterQueue" shows "c"

  @TXN-ROLLBACK-001
  Scenario: A rollback applies nothing, and the settled message is redelivered when its lock expires
    Given a queue "q" with lock duration 5 seconds
    And message "m1" is sent to "q"
    And client "C" receives 1 message from "q"
    And client "C" declares transaction "T"
    When transaction "T" dead-letters "m1"
    And transaction "T" sends "n1" to "q"
    And transaction "T" is rolled back
    Then the operation succeeds
    And peeking "q" shows "m1"
    And peeking "q/$DeadLetterQueue" shows nothing
    When 6 seconds pass
    Then receiver "R" on "q" receives 1 message
    And receiver "R" got "m1" with delivery count 2

  @TXN-ATOM-001
  Scenario: A commit one of whose operations can no longer succeed applies none of them
    Given a queue "q" with lock duration 5 seconds
    And message "m1" is sent to "q"
    And client "C" receives 1 message from "q"
    And client "C" declares transaction "T"
    When transaction "T" sends "n1" to "q"
    And transaction "T" completes "m1"
    And 6 seconds pass
    And transaction "T" is committed
    Then the operation fails with "transaction-rollback"
    And peeking "q" shows "m1"

  @TXN-TIMEOUT-001 @needs:virtual-time
  Scenario: A transaction times out two minutes after its first operation
    Given a queue "q"
    And client "C" declares transaction "T"
    When 300 seconds pass
    And transaction "T" sends "m1" to "q"
    And 119 seconds pass
    And transaction "T" sends "m2" to "q"
    Then the operation succeeds
    When 1 seconds pass
    And transaction "T" is committed
    Then the operation fails with "transaction-timeout"
    And peeking "q" shows nothing

  @TXN-SCOPE-001
  Scenario: A transaction works against one entity
    Given a queue "in"
    And a queue "out"
    And message "m1" is sent to "in"
    And client "C" receives 1 message from "in"
    And client "C" declares transaction "T"
    When transaction "T" completes "m1"
    And transaction "T" sends "x" to "out"
    Then the operation fails with "invalid-operation"
    When transaction "T" is rolled back
    Then peeking "out" shows nothing
    And peeking "in" shows "m1"

  @TXN-VIA-001
  Scenario: Send via the transfer entity: receive from one queue and send to another in one transaction
    Given a queue "in"
    And a queue "out"
    And message "m1" is sent to "in"
    And client "C" receives 1 message from "in"
    And client "C" declares transaction "T"
    When transaction "T" completes "m1"
    And transaction "T" sends "y" to "out" via "in"
    Then the operation succeeds
    And peeking "out" shows nothing
    And peeking "in" shows "m1"
    When transaction "T" is committed
    Then the operation succeeds
    And peeking "out" shows "y"
    And peeking "in" shows nothing

  @TXN-VIA-002 @needs:entity-management
  Scenario: A message sent via a transfer entity to a send-disabled destination never reaches it
    Given a queue "in"
    And a queue "out" with status SendDisabled
    And client "C" declares transaction "T"
    When transaction "T" sends "y" to "out" via "in"
    And transaction "T" is committed
    Then the operation succeeds
    When "out" is updated with status Active
    Then peeking "out" shows nothing
    And peeking "in" shows nothing

  @TXN-ERR-001
  Scenario: A discharged transaction, or another connection's, is unknown
    Given a queue "q"
    And client "C" declares transaction "T"
    And client "D" declares transaction "U"
    When client "D" sends "m0" to "q" in transaction "T"
    Then the operation fails with "transaction-unknown"
    When transaction "T" is committed
    Then the operation succeeds
    When transaction "T" sends "m1" to "q"
    Then the operation fails with "transaction-unknown"
    When transaction "T" is committed
    Then the operation fails with "transaction-unknown"
    And peeking "q" shows nothing

  @TXN-QUOTA-001
  Scenario: A transaction holds at most 100 messages
    Given a queue "q"
    And client "C" declares transaction "T"
    When transaction "T" sends messages "m1" to "m100" to "q"
    Then the operation succeeds
    When transaction "T" sends "m101" to "q"
    Then the operation fails with "quota-exceeded"
    When transaction "T" is committed
    Then the operation succeeds
    And peeking "q" shows 100 messages

  @TXN-CONN-001 @needs:drop-connection
  Scenario: A transaction ends with its connection, applying nothing
    Given a queue "q"
    And client "C" declares transaction "T"
    And transaction "T" sends "m1" to "q"
    When the connection of client "C" drops
    And transaction "T" is committed
    Then the operation fails with "transaction-unknown"
    And peeking "q" shows nothing

  @TXN-TIER-001 @needs:basic-namespace
  Scenario: A Basic namespace has no transactions
    Given a Basic namespace
    And a queue "q"
    When client "C" declares transaction "T"
    Then the operation fails with "invalid-operation"
    And peeking "q" shows nothing
