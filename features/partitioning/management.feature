@needs:partitions @needs:entity-management
Feature: Managing partitioned entities

  Background:
    Given a partitioned queue "pq" with lock duration 5 seconds

  @PART-MGMT-001 @needs:broker-clock
  Scenario: An update reaches every partition
    Given messages "u1" to "u16" are sent to "pq"
    When "pq" is updated with lock duration 20 seconds
    And receiver "A" on "pq" receives 16 messages
    Then every message receiver "A" got is locked until 20 seconds after it was received

  @PART-MGMT-002 @needs:partition-outage @needs:broker-clock
  Scenario: While a partition is down, update and delete fail instead of applying partly
    Given messages "u1" to "u16" are sent to "pq"
    When partition 3 of "pq" goes down
    And "pq" is updated with lock duration 20 seconds
    Then the operation fails with "entity-unavailable"
    And "pq" is deleted
    And the operation fails with "entity-unavailable"
    And partition 3 of "pq" comes back
    And receiver "A" on "pq" receives 1 message
    And every message receiver "A" got is locked until 5 seconds after it was received

  @PART-MGMT-003 @PART-MGMT-004 @needs:partition-outage
  Scenario: Get sums the partitions and reports limited availability while one is down
    Given messages "u1" to "u16" are sent to "pq"
    Then "pq" reports 16 active messages and availability "available"
    And partition 5 of "pq" goes down
    And "pq" reports 15 active messages and availability "limited"
    And partition 5 of "pq" comes back
    And "pq" reports 16 active messages and availability "available"

  @PART-FWD-001 @needs:auto-forward
  Scenario: An auto-forwarded message keeps its partition key on the destination
    Given a partitioned queue "dst"
    And a partitioned queue "src" forwarding to "dst"
    And message "direct" with partition key "k" is sent to "dst"
    When message "forwarded" with partition key "k" is sent to "src"
    Then "direct" and "forwarded" are in the same partition of "dst"
    And peeking "src" shows nothing, or is refused

  @PART-FWD-002 @needs:auto-forward @needs:entity-management
  Scenario: Auto-forwarding from a partitioned queue can be enabled by an update
    Given a partitioned queue "dst"
    And a partitioned queue "src"
    And message "direct" with partition key "k" is sent to "dst"
    When "src" is updated to forward to "dst"
    And the operation succeeds
    And message "forwarded" with partition key "k" is sent to "src"
    Then "direct" and "forwarded" are in the same partition of "dst"
    And peeking "src" shows nothing, or is refused
