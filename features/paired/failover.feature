@needs:paired-namespaces
Feature: The failover sender
  Sends go to the primary entity while it is healthy; failures that count start a timer;
  once FailoverInterval passes with no successful send the entity fails over.

  Background:
    Given a queue "q"

  @PAIR-FAIL-001 @needs:virtual-time
  Scenario: While the primary is healthy nothing changes
    Given factory "F" paired with 2 backlog queues, failover interval 0 seconds and ping interval 60 seconds
    When factory "F" sends "m1", "m2" to "q"
    And the pairing runs for 10 minutes
    Then "m1", "m2" went to the primary
    And peeking "q" shows "m1", "m2"
    And the message "m1" in "q" has no property starting with "x-ms-"
    And the backlog queues hold nothing
    And factory "F" never pinged "q"

  @PAIR-FAIL-001
  Scenario: While the primary is healthy nothing changes, whatever time passes
    Given factory "F" paired with 1 backlog queue, failover interval 0 seconds and ping interval 2 seconds
    When factory "F" sends "m1", "m2" to "q"
    And the pairing runs for 5 seconds
    And factory "F" sends "m3" to "q"
    Then "m1", "m2", "m3" went to the primary
    And peeking "q" shows "m1", "m2", "m3"
    And the message "m1" in "q" has no property starting with "x-ms-"
    And the backlog queues hold nothing
    And factory "F" never pinged "q"

  @PAIR-FAIL-002 @needs:entity-outage
  Scenario Outline: A non-transient failure or a timeout starts the failover timer
    Given factory "F" paired with 1 backlog queue and failover interval 10 seconds
    And factory "F" sends "m0" to "q"
    And the pairing runs for 2 seconds
    And the primary "q" fails with "<code>"
    When factory "F" sends "m1" to "q"
    Then the operation fails with "<code>"
    When the pairing runs for 5 seconds
    And factory "F" sends "m2" to "q"
    Then the operation fails with "<code>"
    When the pairing runs for 5 seconds
    And factory "F" sends "m3" to "q"
    Then "m3" went to a backlog queue
    And the backlog queues hold "m3"

    Examples:
      | code               |
      | entity-unavailable |
      | quota-exceeded     |
      | entity-not-found   |
      | timeout            |

  @PAIR-FAIL-003 @needs:entity-outage
  Scenario Outline: Transient errors and client errors never fail the entity over
    Given factory "F" paired with 1 backlog queue, failover interval 0 seconds and ping interval 2 seconds
    And the primary "q" fails with "<code>"
    When factory "F" sends "m1" to "q"
    Then the operation fails with "<code>"
    When the pairing runs for 6 seconds
    And factory "F" sends "m2" to "q"
    Then the operation fails with "<code>"
    And the backlog queues hold nothing
    And factory "F" never pinged "q"
    When the primary "q" recovers
    And factory "F" sends "m3" to "q"
    Then "m3" went to the primary
    And peeking "q" shows "m3"

    Examples:
      | code              |
      | server-busy       |
      | connection-lost   |
      | unauthorized      |
      | argument-error    |
      | invalid-operation |

  @PAIR-FAIL-004 @needs:entity-outage
  Scenario: Failover engages once the interval has passed with no successful send
    Given factory "F" paired with failover interval 10 seconds and ping interval 2 seconds
    And the primary "q" becomes unavailable
    And factory "F" sends "m1" to "q"
    And the operation fails with "entity-unavailable"
    When the pairing runs for 13 seconds
    Then factory "F" has failed "q" over
    And factory "F" pinged "q" 1 time
    When factory "F" sends "m2" to "q"
    Then "m2" went to a backlog queue
    And the backlog queues hold "m2"

  @PAIR-FAIL-004 @needs:entity-outage
  Scenario: A successful send within the interval stops the timer
    Given factory "F" paired with failover interval 10 seconds
    And the primary "q" becomes unavailable
    And factory "F" sends "m1" to "q"
    And the operation fails with "entity-unavailable"
    When the pairing runs for 5 seconds
    And the primary "q" recovers
    And factory "F" sends "m2" to "q"
    And the primary "q" becomes unavailable
    And the pairing runs for 7 seconds
    And factory "F" sends "m3" to "q"
    Then the operation fails with "entity-unavailable"
    And "m2" went to the primary
    And the backlog queues hold nothing

  @PAIR-FAIL-005 @needs:entity-outage
  Scenario: Failover is per entity
    Given a queue "r"
    And factory "F" paired with failover interval 0 seconds
    And the primary "q" becomes unavailable
    When factory "F" sends "m1" to "q"
    And factory "F" sends "m2" to "r"
    Then "m1" went to a backlog queue
    And "m2" went to the primary
    And peeking "r" shows "m2"
    And the backlog queues hold "m1"

  @PAIR-FAIL-006 @needs:entity-outage
  Scenario: After failover nothing is sent to the primary until a ping succeeds; pinging starts at once
    Given factory "F" paired with failover interval 0 seconds and ping interval 5 seconds
    And the primary "q" becomes unavailable
    When factory "F" sends "m1" to "q"
    And the primary "q" recovers
    And factory "F" sends "m2" to "q"
    And the pairing runs for 4 seconds
    And factory "F" sends "m3" to "q"
    Then "m1", "m2", "m3" went to a backlog queue
    And factory "F" sent application messages to the primary "q" 1 time
    And factory "F" never pinged "q"
    When the pairing runs for 1 second
    Then factory "F" pinged "q" at 5 seconds after its failover
    When factory "F" sends "m4" to "q"
    Then "m4" went to the primary
    And factory "F" sent application messages to the primary "q" 2 times
