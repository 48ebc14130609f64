@needs:partitions
Feature: What a partitioned entity is, and when it is chosen

  # Model-level: reads the model's partition stores (each sequence number in exactly one of
  # them, the one its top 16 bits name). It grades the model's bookkeeping, not a target.
  @PART-STRUCT-001 @PART-STRUCT-002 @needs:model-internals
  Scenario: A Standard partitioned queue has 16 partitions, and each message is in one of them
    Given a partitioned queue "pq"
    When messages "u1" to "u20" are sent to "pq"
    Then "pq" has 16 partitions
    And every message of "pq" is in exactly one partition

  @PART-STRUCT-001
  Scenario: Each message sent to a partitioned queue is held once, in one of its partitions
    Given a partitioned queue "pq"
    When messages "u1" to "u20" are sent to "pq"
    Then every message "u1" to "u20" of "pq" is held once, in one of its 16 partitions

  @PART-STRUCT-003 @needs:premium-namespace
  Scenario: In a partitioned Premium namespace every entity is partitioned with the namespace's count
    Given a Premium namespace with 2 partitions
    And a queue "pq"
    When messages "u1" to "u6" are sent to "pq"
    Then the messages of "pq" are spread over 2 partitions
    And a non-partitioned queue "plain" is created
    And the operation fails with "invalid-operation"

  @PART-CREATE-001 @needs:entity-management
  Scenario: A Standard namespace holds partitioned and non-partitioned entities side by side
    Given a partitioned queue "pq"
    And a queue "q"
    When messages "u1" to "u4" are sent to "pq"
    And messages "v1" to "v4" are sent to "q"
    Then the messages of "pq" are spread over 4 partitions
    And the messages of "q" are spread over 1 partition

  @PART-CREATE-002 @needs:entity-management
  Scenario: Partitioning cannot be changed after creation
    Given a partitioned queue "pq"
    And a queue "q"
    And messages "u1" to "u3" are sent to "pq"
    When "pq" is updated to disable partitioning
    Then the operation fails with either "invalid-operation" or "argument-error"
    And "q" is updated to enable partitioning
    And the operation fails with either "invalid-operation" or "argument-error"
    And peeking "pq" shows exactly "u1", "u2", "u3" in any order

  @PART-LIMIT-001 @needs:premium-namespace
  Scenario: A partitioned Premium namespace limits a message and a batch to 1 MB
    Given a Premium namespace with 2 partitions
    And a queue "pq"
    When message "small" with a body of 1000000 bytes is sent to "pq"
    Then the operation succeeds
    And message "big" with a body of 1100000 bytes is sent to "pq"
    And the operation fails with "message-size-exceeded"
    And messages "b1", "b2" with a body of 600000 bytes each are sent to "pq" as one batch
    And the operation fails with "message-size-exceeded"

  @PART-LIMIT-002 @needs:model-internals
  Scenario: A Standard namespace holds at most 100 partitioned queues and topics
    When 100 partitioned queues are created
    Then the operation succeeds
    And a partitioned queue "one-more" is created
    And the operation fails with "quota-exceeded"
    And a queue "plain" is created
    And the operation succeeds

  @PART-LIMIT-003 @needs:model-internals
  Scenario: A partitioned queue counts as one entity toward the 10,000-entity quota
    When 10 partitioned queues are created
    And 9990 queues are created
    Then the operation succeeds
    And a queue "one-more" is created
    And the operation fails with "quota-exceeded"
