@needs:partitions
Feature: Receiving and peeking on partitioned entities

  Background:
    Given a partitioned queue "pq" with lock duration 5 seconds

  @PART-RECV-001
  Scenario: A receive returns the head of one of the partitions
    Given messages "a1" to "a3" with partition key "a" are sent to "pq"
    And messages "b1" to "b3" with partition key "b" are sent to "pq"
    When receiver "A" on "pq" receives 1 message
    Then receiver "A" got the head of one of the partitions of "pq"
    And receiver "A" receives 1 message
    And receiver "A" got the head of one of the partitions of "pq"

  @PART-RECV-002
  Scenario: Receiving repeatedly gets every message exactly once
    Given messages "u1" to "u20" are sent to "pq"
    And messages "k1" to "k5" with partition key "k" are sent to "pq"
    And receiver "R" on "pq" in receive-and-delete mode
    When receiver "R" receives 25 messages
    Then receiver "R" got exactly "u1" to "u20" and "k1" to "k5" in any order
    And receiver "R" receives 1 message
    And receiver "R" got no message

  @PART-RECV-003 @needs:deferral @needs:dead-letter
  Scenario: Complete, defer and dead-letter behave as on any queue
    Given messages "c", "f", "d" with partition key "k" are sent to "pq"
    When receiver "A" on "pq" receives 3 messages
    And receiver "A" completes "c"
    And receiver "A" defers "f"
    And receiver "A" dead-letters "d" with reason "why" and description "because"
    And receiver "B" on "pq" receives the deferred message "f"
    And receiver "D" on "pq/$DeadLetterQueue" receives 1 message
    Then receiver "B" got "f"
    And receiver "D" got "d" with reason "why" and description "because"
    And receiver "A" completes "c"
    And the operation fails with "message-lock-lost"

  @PART-PEEK-001
  Scenario: A peek on a non-partitioned queue returns its oldest message
    Given a queue "q"
    And messages "m1", "m2", "m3" are sent to "q"
    When peeking 1 message of "q"
    Then the peek shows "m1"

  @PART-PEEK-002 @PART-PEEK-003
  Scenario: A peek reads one partition, and peeking on finds every message once
    Given messages "u1" to "u8" are sent to "pq"
    When peeking 5 messages of "pq"
    Then the peek shows messages of one partition, oldest first
    And the peek may show fewer than 5 messages
    And peeking "pq" shows exactly "u1", "u2", "u3", "u4", "u5", "u6", "u7", "u8" in any order

  # Model-level (PART-LOWVOL-001's note): any broker returns nothing while every message is
  # locked by another receiver, so a target passing this shows nothing about front-end caches.
  @PART-LOWVOL-001 @needs:model-internals
  Scenario: A receive may find nothing while every message is locked elsewhere
    Given messages "u1", "u2" are sent to "pq"
    When receiver "A" on "pq" receives 2 messages
    And receiver "B" on "pq" receives 1 message
    Then receiver "B" got no message
    And 6 seconds pass
    And receiver "B" receives 2 messages
    And receiver "B" got exactly "u1", "u2" in any order
