@needs:partitions
Feature: Messages without a partition key, and partitions that are down

  Background:
    Given a partitioned queue "pq" with lock duration 5 seconds

  @PART-NOKEY-001 @needs:model-internals
  Scenario: Unkeyed messages go round-robin over the partitions
    When messages "u1" to "u32" are sent to "pq"
    Then each of the 16 partitions of "pq" holds 2 messages
    And the messages "u1" to "u16" of "pq" are in 16 different partitions

  @PART-NOKEY-001 @PART-STRUCT-002
  Scenario: Unkeyed messages reach every one of the 16 partitions, as their sequence numbers show
    When messages "u1" to "u256" are sent to "pq"
    Then the messages of "pq" are spread over 16 partitions
    And no partition of "pq" holds more than 40 of its 256 messages

  @PART-NOKEY-002 @PART-AVAIL-001 @needs:partition-outage
  Scenario: With a partition down, unkeyed sends still succeed and other partitions still deliver
    Given messages "before1" to "before16" are sent to "pq"
    When the partition holding "before1" in "pq" goes down
    And messages "after1" to "after16" are sent to "pq"
    Then the operation succeeds
    And receiver "A" on "pq" receives 40 messages
    And receiver "A" got 31 messages, not "before1"
    And the partition holding "before1" in "pq" comes back
    And receiver "A" receives 5 messages
    And receiver "A" got "before1"

  @PART-AVAIL-002 @needs:partition-outage
  Scenario: A keyed send fails only when its own partition is down
    Given message "x1" with partition key "x" is sent to "pq"
    And message "y1" with partition key "y" is sent to "pq"
    And "x1" and "y1" are in different partitions of "pq"
    When the partition holding "x1" in "pq" goes down
    And message "y2" with partition key "y" is sent to "pq"
    Then the operation succeeds
    And message "x2" with partition key "x" is sent to "pq"
    And the operation fails with "entity-unavailable"
