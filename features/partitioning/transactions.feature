@needs:transactions
Feature: Transactions on partitioned entities

  @PART-TXN-001 @needs:partitions
  Scenario: A transactional message needs a partition key
    Given a partitioned queue "pq"
    When a transaction sends "t1" to "pq"
    Then the operation fails with "invalid-operation"
    And a transaction sends "t2" with partition key "k" to "pq"
    And the operation succeeds

  @PART-TXN-002 @needs:partitions
  Scenario: All messages of a transaction share one partition key
    Given a partitioned queue "pq"
    When a transaction sends "a" with partition key "k1" and "b" with partition key "k2" to "pq"
    Then the operation fails with "invalid-operation"
    And peeking "pq" shows nothing
    And a transaction sends "c" with partition key "k1" and "d" with partition key "k1" to "pq"
    And peeking "pq" shows exactly "c", "d" in any order

  @PART-TXN-003 @needs:partitions @needs:sessions
  Scenario: One transaction cannot reach several sessions of a partitioned entity
    Given a partitioned queue "sq" with sessions
    When a transaction sends "a" with session "s1" and "b" with session "s2" to "sq"
    Then the operation fails with "invalid-operation"

  @PART-TXN-004 @needs:sessions
  Scenario: On a non-partitioned session queue one transaction can reach several sessions
    Given a queue "sq" with sessions
    When a transaction sends "a" with session "s1" and "b" with session "s2" to "sq"
    Then the operation succeeds
    And receiver "A" accepts session "s1" on "sq"
    And receiver "A" receives 1 message
    And receiver "A" got "a"
    And receiver "B" accepts session "s2" on "sq"
    And receiver "B" receives 1 message
    And receiver "B" got "b"
