@needs:paired-namespaces @needs:entity-outage
Feature: The syphon
  Long polls on every backlog queue; every message goes to the entity named by its x-ms-path,
  with its properties translated back, once that entity accepts it.

  Background:
    Given a queue "q"

  @PAIR-SYPH-001 @needs:time-to-live @needs:virtual-time
  Scenario: Without a syphon, failed-over messages stay in the backlog queues
    Given factory "F" paired with 1 backlog queue and failover interval 0 seconds
    And the primary "q" becomes unavailable
    And factory "F" sends "m1" with time to live 10 seconds to "q"
    And the primary "q" recovers
    When the pairing runs for 1 day
    Then the backlog queues hold "m1"
    And peeking "q" shows nothing

  @PAIR-SYPH-001 @needs:time-to-live
  Scenario: Without a syphon, failed-over messages stay in the backlog queues past their time to live
    Given factory "F" paired with 1 backlog queue, failover interval 0 seconds and ping interval 2 seconds
    And the primary "q" becomes unavailable
    And factory "F" sends "m1" with time to live 2 seconds to "q"
    And the primary "q" recovers
    When the pairing runs for 5 seconds
    Then factory "F" pinged "q" 1 time
    And the backlog queues hold "m1"
    And peeking "q" shows nothing

  @PAIR-SYPH-002 @needs:topics @needs:virtual-time
  Scenario: The syphon delivers each message to its own destination once that is available
    Given a topic "t" with subscriptions "s"
    And factory "S" paired with 2 backlog queues, failover interval 0 seconds and running the syphon
    And the primary "q" becomes unavailable
    And the primary "t" becomes unavailable
    And factory "S" sends "m2" to "t"
    And factory "S" sends "m1" to "q"
    When the primary "q" recovers
    And the pairing runs for 2 minutes
    Then peeking "q" shows "m1"
    And the backlog queues hold "m2"
    When the primary "t" recovers
    And the pairing runs for 2 minutes
    Then peeking "t/Subscriptions/s" shows "m2"
    And the backlog queues hold nothing

  @PAIR-SYPH-002 @needs:virtual-time
  Scenario: The syphon empties a backlog queue holding more messages than one receive returns
    Given factory "S" paired with 1 backlog queue, failover interval 0 seconds and running the syphon
    And the primary "q" becomes unavailable
    And each of 1 new clients of factory "S" sends 100 messages to "q"
    When the primary "q" recovers
    And the pairing runs for 2 minutes
    Then peeking "q" shows exactly the messages factory "S" accepted for it
    And the backlog queues hold nothing

  @PAIR-SYPH-003 @needs:scheduling @needs:time-to-live @needs:virtual-time
  Scenario: The syphon translates the properties back
    Given factory "S" paired with 1 backlog queue, failover interval 0 seconds and running the syphon
    And the primary "q" becomes unavailable
    And factory "S" sends "m1" with session "s1", time to live 300 seconds, property "color" = "blue" to "q"
    And factory "S" sends "m2" with scheduled enqueue time in 600 seconds to "q"
    When the primary "q" recovers
    And the pairing runs for 2 minutes
    Then the backlog queues hold nothing
    And the message "m1" in "q" has session "s1", time to live 300 seconds, property "color" = "blue" and no property starting with "x-ms-"
    And the message "m2" in "q" has scheduled enqueue time at its send time plus 600 seconds, state "scheduled", no session id and no property starting with "x-ms-"

  @PAIR-SYPH-002 @needs:topics
  Scenario: Each message reaches its own destination once that is available, exactly once
    Given a topic "t" with subscriptions "s"
    And the secondary namespace has a queue at backlog path 0 with lock duration 5 seconds
    And factory "F" paired with 1 backlog queue and failover interval 0 seconds
    And the primary "q" becomes unavailable
    And the primary "t" becomes unavailable
    And factory "F" sends "m2" to "t"
    And factory "F" sends "m1" to "q"
    And the primary "q" recovers
    When factory "S" paired with 1 backlog queue and running the syphon
    And the pairing runs for 2 seconds
    Then peeking "q" shows "m1"
    And the backlog queues hold "m2"
    When the primary "t" recovers
    And the pairing runs for 8 seconds
    Then peeking "t/Subscriptions/s" shows "m2"
    And peeking "q" shows "m1"
    And the backlog queues hold nothing

  @PAIR-SYPH-003 @needs:scheduling @needs:time-to-live
  Scenario: The syphon translates the properties back, and each message arrives once
    Given factory "F" paired with 1 backlog queue and failover interval 0 seconds
    And the primary "q" becomes unavailable
    And factory "F" sends "m1" with session "s1", time to live 300 seconds, property "color" = "blue" to "q"
    And factory "F" sends "m2" with scheduled enqueue time in 600 seconds to "q"
    And factory "F" sends "m3" with property "x-ms-path-like" = "kept" to "q"
    And the primary "q" recovers
    When factory "S" paired with 1 backlog queue and running the syphon
    And the pairing runs for 2 seconds
    Then the backlog queues hold nothing
    And the message "m1" in "q" has session "s1", time to live 300 seconds, property "color" = "blue" and no property starting with "x-ms-"
    And the message "m2" in "q" has scheduled enqueue time at its send time plus 600 seconds, state "scheduled", no session id and no property starting with "x-ms-"
    And the message "m3" in "q" has property "x-ms-path-like" = "kept", no session id, no time to live and no scheduled enqueue time

  @PAIR-SYPH-004 @needs:virtual-time
  Scenario: Each syphon receive is a 15-minute long poll that ends early only when a message arrives
    Given factory "S" paired with 1 backlog queue, failover interval 0 seconds and running the syphon
    When the pairing runs for 20 minutes
    And the primary "q" becomes unavailable
    And factory "S" sends "m1" to "q"
    And the primary "q" recovers
    And the pairing runs for 40 minutes
    Then the syphon of "S" started receives on backlog queue 0 at 0, 15, 20, 35, 50 minutes
    And peeking "q" shows "m1"

  @PAIR-SYPH-005 @needs:virtual-time @needs:instant-time
  Scenario: An idle syphon over 10 backlog queues calls receive 40 times an hour, 960 a day, 28800 in 30 days
    Given factory "S" paired with 10 backlog queues and running the syphon
    When the pairing runs for 30 days
    Then the syphon of "S" started 40 receive calls in the first hour
    And the syphon of "S" started 960 receive calls in the first day
    And the syphon of "S" started 28800 receive calls in the first 30 days

  @PAIR-COST-001
  Scenario: A message moved through a backlog queue costs four operations
    Given factory "S" paired with 1 backlog queue, failover interval 0 seconds and running the syphon
    And the primary "q" becomes unavailable
    And factory "S" sends "m1" to "q"
    And the primary "q" recovers
    When the pairing runs for 1 second
    And receiver "R" on "q" receives 1 message
    Then receiver "R" got "m1"
    And message "m1" was billed these operations
      | operation                       |
      | send to the backlog queue       |
      | receive from the backlog queue  |
      | send to the primary entity      |
      | receive from the primary entity |

  @PAIR-ORDER-001
  Scenario: A message sent after recovery may arrive before one sent during the outage, even in one session
    Given factory "F" paired with 1 backlog queue, failover interval 0 seconds and ping interval 5 seconds
    And the primary "q" becomes unavailable
    And factory "F" sends "m1" with session "s1" to "q"
    And the primary "q" recovers
    And the pairing runs for 5 seconds
    And factory "F" sends "m2" with session "s1" to "q"
    When factory "S" paired with 1 backlog queue and running the syphon
    And the pairing runs for 1 second
    Then "m2" went to the primary
    And peeking "q" shows "m2", "m1"
