Feature: Settling send operations
  A send completes only when the broker has accepted the message, and a rejection
  reaches the sender with everything it needs to decide what to do.

  Background:
    Given a queue "q" with lock duration 5 seconds

  @SETTLE-SEND-001
  Scenario: An accepted send completes silently and the message is stored
    When message "m1" is sent to "q"
    Then the operation succeeds
    And receiver "A" on "q" receives 1 message
    And receiver "A" got "m1"
    And messages "m2", "m3" are sent to "q" as one batch
    And the operation succeeds
    And peeking "q" shows "m1", "m2", "m3"

  @SETTLE-SEND-002 @SETTLE-SEND-006
  Scenario: A message over the maximum size is rejected with the details of the rejection
    When message "big" with a body of 300000 bytes is sent to "q"
    Then the operation fails with "message-size-exceeded"
    And the error has a tracking id and says a retry will not succeed
    And peeking "q" shows nothing

  @SETTLE-SEND-006
  Scenario: Properties count toward the message size
    When message "props" with a body of 262000 bytes and a property "note" of 2000 characters is sent to "q"
    Then the operation fails with "message-size-exceeded"

  @SETTLE-SEND-003
  Scenario: Pipelined sends each complete, and every message is stored
    When messages "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10" are sent to "q" without waiting for each other
    Then the operation succeeds
    And peeking "q" shows exactly "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8", "p9", "p10" in any order

  @SETTLE-SEND-004
  Scenario: A pre-settled transfer returns nothing, not even a rejection
    When message "fire" is sent to "q" pre-settled
    And message "too-big" with a body of 300000 bytes is sent to "q" pre-settled
    Then the operation succeeds
    And peeking "q" shows "fire"

  @SETTLE-SEND-005
  Scenario: A full entity rejects further sends with quota-exceeded
    Given a queue "small" with max size 1 MB
    When messages "b1", "b2", "b3", "b4" with a body of 250000 bytes each are sent to "small"
    And message "b5" with a body of 250000 bytes is sent to "small"
    Then the operation fails with "quota-exceeded"
    And the error says a retry will not succeed
    And peeking "small" shows "b1", "b2", "b3", "b4"

  @SETTLE-SEND-007
  Scenario: Sending to an entity that does not exist fails
    When message "lost" is sent to the missing entity "nowhere"
    Then the operation fails with "entity-not-found"

  @SETTLE-SEND-009
  Scenario: A property over 32 KB is refused and nothing is stored
    When message "big" with a property "note" of 33000 characters is sent to "q"
    Then the operation is refused
    When message "ok" with a property "note" of 30000 characters is sent to "q"
    Then the operation succeeds
    And peeking "q" shows "ok"
