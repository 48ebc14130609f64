@needs:partitions
Feature: Partition keys

  Background:
    Given a partitioned queue "pq" with lock duration 5 seconds

  @PART-KEY-002 @PART-KEY-006 @PART-KEY-007 @PART-SEQ-001
  Scenario: Messages with one partition key share a partition and keep their order
    When messages "k1" to "k5" with partition key "orders-17" are sent to "pq"
    And messages "u1" to "u5" are sent to "pq"
    Then the messages "k1" to "k5" of "pq" are in one partition
    And the sequence numbers of "k1", "k2", "k3", "k4", "k5" strictly increase
    And receiver "A" on "pq" receives 10 messages
    And receiver "A" got "k1", "k2", "k3", "k4", "k5" in that order among its messages

  @PART-KEY-001 @needs:sessions
  Scenario: The session id is the partition key
    Given a partitioned queue "sq" with lock duration 5 seconds and sessions
    When messages "s1" to "s4" with session "cart-9" are sent to "sq"
    Then the messages "s1" to "s4" of "sq" are in one partition

  @PART-KEY-003 @needs:sessions
  Scenario: A partition key that differs from the session id is refused
    Given a partitioned queue "sq" with sessions
    When message "bad" with session "s1" and partition key "other" is sent to "sq"
    Then the operation fails with "invalid-operation"
    And message "good" with session "s1" and partition key "s1" is sent to "sq"
    And the operation succeeds

  @PART-KEY-004 @needs:duplicate-detection
  Scenario: With duplicate detection the message id is the key, so a copy meets its original
    Given a partitioned queue "dq" with duplicate detection window 60 seconds
    When messages "a", "b", "c", "d" are sent to "dq"
    And messages "a", "b", "c", "d" are sent to "dq"
    Then peeking "dq" shows exactly "a", "b", "c", "d" in any order

  @PART-KEY-005 @needs:model-internals
  Scenario: Without duplicate detection the message id is not a key
    When messages "same", "same", "same", "same" are sent to "pq"
    Then the copies of "same" in "pq" are in 4 different partitions

  @PART-KEY-005
  Scenario: Without duplicate detection copies of one message id spread like unkeyed messages
    When 64 copies of message "same" are sent to "pq"
    Then the copies of "same" in "pq" are spread over more than one partition

  @PART-DUP-001 @needs:duplicate-detection
  Scenario: On a partitioned entity a duplicate is the same message id with the same partition key
    Given a partitioned queue "dq" with duplicate detection window 60 seconds
    When message "m1" with partition key "a" is sent to "dq"
    And message "m1" with partition key "b" is sent to "dq"
    And message "m1" with partition key "a" is sent to "dq"
    Then peeking "dq" shows exactly "m1", "m1" in any order

  @PART-KEY-008 @needs:partition-outage
  Scenario: A keyed message whose partition is down is refused, not placed elsewhere
    Given message "first" with partition key "k" is sent to "pq"
    When the partition holding "first" in "pq" goes down
    And message "second" with partition key "k" is sent to "pq"
    Then the operation fails with "entity-unavailable"
    And the partition holding "first" in "pq" comes back
    And peeking "pq" shows exactly "first" in any order

  @PART-SESS-001 @needs:sessions
  Scenario: Sessions keep their order and state on a partitioned entity
    Given a partitioned queue "sq" with lock duration 5 seconds and sessions
    When messages "a1", "a2", "a3" with session "s" are sent to "sq"
    And receiver "A" accepts session "s" on "sq"
    And receiver "A" receives 3 messages
    And receiver "A" sets the session state to "half-done"
    Then receiver "A" got "a1", "a2", "a3"
    And the session state seen by "A" is "half-done"

  @PART-KEY-009 @needs:duplicate-detection
  Scenario: A message without a MessageId is accepted by a duplicate-detecting partitioned queue, unkeyed
    Given a partitioned queue "dq" with duplicate detection window 60 seconds
    When messages "u1" to "u4" with no message id are sent to "dq"
    Then the operation succeeds
    And the messages of "dq" are spread over 4 partitions
