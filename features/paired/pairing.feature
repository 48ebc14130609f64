@needs:paired-namespaces
Feature: Pairing a messaging factory with a secondary namespace
  PairNamespaceAsync with SendAvailabilityPairedNamespaceOptions. The target under test is
  the primary namespace; a second namespace of the same kind is the secondary. The client
  logic is the reference's (sbreference/paired), driven against both.

  Background:
    Given a queue "q"

  @PAIR-API-001 @needs:entity-outage @needs:virtual-time
  Scenario: Pairing engages the five automatic behaviours
    Given factory "F" paired with 2 backlog queues, failover interval 0 seconds, ping interval 60 seconds and running the syphon
    Then the secondary namespace has backlog queues 0, 1
    When the primary "q" becomes unavailable
    And factory "F" sends "m1" to "q"
    Then "m1" went to a backlog queue
    When the pairing runs for 60 seconds
    Then factory "F" pinged "q" 1 time
    When the primary "q" recovers
    And the pairing runs for 60 seconds
    Then factory "F" pinged "q" 2 times
    And peeking "q" shows "m1"
    And the backlog queues hold nothing
    When the primary factory of "F" closes
    And the pairing runs for 5 seconds
    Then the secondary factory of "F" is faulted

  @PAIR-API-001 @needs:entity-outage
  Scenario: Pairing engages the five automatic behaviours, in seconds
    Given the secondary namespace has a queue at backlog path 0 with lock duration 5 seconds
    And factory "F" paired with 2 backlog queues, failover interval 0 seconds, ping interval 3 seconds and running the syphon
    Then the secondary namespace has backlog queues 0, 1
    When the primary "q" becomes unavailable
    And factory "F" sends "m1" to "q"
    Then "m1" went to backlog queue 0
    When the pairing runs for 3 seconds
    Then factory "F" pinged "q" 1 time
    When the primary "q" recovers
    And the pairing runs for 8 seconds
    Then factory "F" pinged "q" 2 times
    And peeking "q" shows "m1"
    And the backlog queues hold nothing
    When the primary factory of "F" closes
    And the pairing runs for 5 seconds
    Then the secondary factory of "F" is faulted

  @PAIR-OPT-001
  Scenario: Ten backlog queues by default
    Given factory "F" paired
    Then the secondary namespace has backlog queues 0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and no backlog queue 10

  @PAIR-OPT-001
  Scenario: A pairing with fewer than one backlog queue is refused
    When factory "F" is paired with 0 backlog queues
    Then the operation fails with "argument-error"
    And the secondary namespace has no backlog queue 0

  @PAIR-OPT-002 @needs:entity-outage
  Scenario: With a failover interval of zero the first failure that counts fails the entity over
    Given factory "F" paired with failover interval 0 seconds
    And the primary "q" becomes unavailable
    When factory "F" sends "m1" to "q"
    Then "m1" went to a backlog queue
    And the backlog queues hold "m1"

  @PAIR-OPT-002 @needs:entity-outage
  Scenario: Failures are accepted for the failover interval, then the entity fails over
    Given factory "F" paired with 1 backlog queue and failover interval 10 seconds
    And the primary "q" becomes unavailable
    When factory "F" sends "m1" to "q"
    Then the operation fails with "entity-unavailable"
    When the pairing runs for 5 seconds
    And factory "F" sends "m2" to "q"
    Then the operation fails with "entity-unavailable"
    When the pairing runs for 5 seconds
    And factory "F" sends "m3" to "q"
    Then "m3" went to a backlog queue
    And the backlog queues hold "m3"

  @PAIR-OPT-003 @needs:entity-outage @needs:virtual-time
  Scenario: Only a pairing that runs the syphon receives from the backlog queues
    Given factory "F" paired with 1 backlog queue and failover interval 0 seconds
    And the primary "q" becomes unavailable
    And factory "F" sends "m1" to "q"
    And the primary "q" recovers
    When the pairing runs for 30 minutes
    Then the backlog queues hold "m1"
    And factory "F" never received from a backlog queue
    When factory "S" paired with 1 backlog queue and running the syphon
    And the pairing runs for 1 minute
    Then peeking "q" shows "m1"
    And the backlog queues hold nothing
    And factory "F" never received from a backlog queue

  @PAIR-OPT-003 @needs:entity-outage
  Scenario: A pairing without the syphon never receives from the backlog queues; one with it moves them
    Given factory "F" paired with 1 backlog queue and failover interval 0 seconds
    And the primary "q" becomes unavailable
    And factory "F" sends "m1" to "q"
    And the primary "q" recovers
    When the pairing runs for 5 seconds
    Then the backlog queues hold "m1"
    And peeking "q" shows nothing
    And factory "F" never received from a backlog queue
    When factory "S" paired with 1 backlog queue and running the syphon
    And the pairing runs for 2 seconds
    Then peeking "q" shows "m1"
    And the backlog queues hold nothing
    And factory "F" never received from a backlog queue
