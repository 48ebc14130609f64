@needs:paired-namespaces @needs:entity-outage
Feature: Routing failed-over messages to the backlog queues

  Background:
    Given a queue "q"

  @PAIR-ROUTE-001
  Scenario: Failed-over messages wait in a backlog queue, not in the primary entity
    Given factory "F" paired with 4 backlog queues, failover interval 0 seconds and random backlog picks
    And the primary "q" becomes unavailable
    When factory "F" sends "m1", "m2", "m3" to "q"
    Then "m1", "m2", "m3" went to one backlog queue
    And the backlog queues hold "m1", "m2", "m3"
    When the primary "q" recovers
    Then peeking "q" shows nothing
    And receiver "R" on "q" receives 1 message
    And receiver "R" got no message
    When factory "S" paired with 4 backlog queues and running the syphon
    And the pairing runs for 1 second
    Then peeking "q" shows exactly "m1", "m2", "m3" in any order
    And the backlog queues hold nothing

  @PAIR-ROUTE-002
  Scenario: A failing backlog queue is pulled from the rotation for every sender of the factory
    Given factory "F" paired with 3 backlog queues and failover interval 0 seconds
    And the primary "q" becomes unavailable
    And backlog queue 0 becomes unavailable
    When factory "F" sends "m1" to "q" through client "C1"
    Then "m1" went to backlog queue 1
    And factory "F" has backlog queues 1, 2 in rotation
    When backlog queue 0 recovers
    And factory "F" sends "m2" to "q" through client "C2"
    Then "m2" went to backlog queue 1
    And backlog queue 0 holds nothing
    And factory "F" sent to backlog queue 0 1 time

  @PAIR-ROUTE-003
  Scenario: With no backlog queue left in the rotation the caller gets the error
    Given factory "F" paired with 1 backlog queue and failover interval 0 seconds
    And the primary "q" becomes unavailable
    And backlog queue 0 becomes unavailable
    When factory "F" sends "m1" to "q"
    Then the operation fails with "entity-unavailable"
    When backlog queue 0 recovers
    And the primary "q" recovers
    Then the backlog queues hold nothing
    And peeking "q" shows nothing

  @PAIR-ROUTE-004
  Scenario: Once an entity has failed over, every sender of the factory sends to the backlog
    Given factory "F" paired with 2 backlog queues and failover interval 0 seconds
    And the primary "q" becomes unavailable
    When factory "F" sends "m1" to "q" through client "C1"
    And factory "F" sends "m2" to "q" through client "C2"
    Then "m1", "m2" went to a backlog queue
    And factory "F" sent application messages to the primary "q" 1 time
    And the backlog copy of "m2" has property "x-ms-path" naming "q"

  @PAIR-ROUTE-005
  Scenario: Each client keeps one random backlog queue, and the picks spread over all of them
    Given factory "F" paired with 10 backlog queues, failover interval 0 seconds and random backlog picks
    And the primary "q" becomes unavailable
    When each of 100 new clients of factory "F" sends 3 messages to "q"
    Then each client's messages went to one backlog queue
    And every backlog queue holds at least one message
