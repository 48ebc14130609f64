@needs:paired-namespaces @needs:entity-management
Feature: Backlog queues
  Queues of the secondary namespace at <primary namespace>/x-servicebus-transfer/<i>,
  created by the pairing only where missing.

  Background:
    Given a queue "q"

  @PAIR-BACKLOG-001
  Scenario: The backlog queues are named after the primary namespace
    Given factory "F" paired with 3 backlog queues
    Then the secondary namespace has backlog queues 0, 1, 2 and no backlog queue 3
    And backlog queue 0 is at "<primary namespace>/x-servicebus-transfer/0"
    And backlog queue 2 is at "<primary namespace>/x-servicebus-transfer/2"

  @PAIR-BACKLOG-002
  Scenario: A backlog queue the pairing creates has the documented description
    Given factory "F" paired with 2 backlog queues
    Then backlog queue 1 has these properties, and the QueueDescription defaults for all others
      | property                               | value             |
      | MaxSizeInMegabytes                     | 5120              |
      | MaxDeliveryCount                       | int.MaxValue      |
      | DefaultMessageTimeToLive               | TimeSpan.MaxValue |
      | AutoDeleteOnIdle                       | TimeSpan.MaxValue |
      | LockDuration                           | 1 minute          |
      | EnableDeadLetteringOnMessageExpiration | true              |
      | EnableBatchedOperations                | true              |

  @PAIR-BACKLOG-003
  Scenario: Pairing creates only the missing backlog queues and keeps what the others hold
    Given the secondary namespace has a queue at backlog path 1
    And message "old" for "q" is waiting at backlog path 1
    When factory "F" paired with 3 backlog queues
    Then the secondary namespace has backlog queues 0, 1, 2
    And backlog queue 1 holds "old"
    And backlog queue 1 has max size 1024 MB
    And backlog queue 0 has max size 5120 MB
    And backlog queue 2 has max size 5120 MB

  @PAIR-BACKLOG-004 @needs:entity-outage
  Scenario: Extra backlog queues are left in place and never used
    Given the secondary namespace has a queue at backlog path 7
    And message "extra" for "q" is waiting at backlog path 7
    And factory "F" paired with 5 backlog queues, failover interval 0 seconds and random backlog picks
    And the primary "q" becomes unavailable
    When each of 40 new clients of factory "F" sends 1 message to "q"
    And the primary "q" recovers
    And factory "S" paired with 5 backlog queues and running the syphon
    And the pairing runs for 3 seconds
    Then peeking "q" shows exactly the messages factory "F" accepted for it
    And backlog queue 7 holds "extra"
    And the secondary namespace has no backlog queue 5
    And factory "F" sent to backlog queue 7 0 times
    And factory "S" never received from backlog queue 7

  @PAIR-BACKLOG-005 @needs:entity-outage
  Scenario: A backlog queue described differently is used as it is
    Given the secondary namespace has a queue at backlog path 0 with lock duration 30 seconds and max delivery count 5
    When factory "F" paired with 2 backlog queues and failover interval 0 seconds
    Then backlog queue 0 has lock duration 30 seconds and max delivery count 5
    And backlog queue 0 has max size 1024 MB
    And backlog queue 1 has lock duration 60 seconds and max delivery count 2147483647
    When the primary "q" becomes unavailable
    And factory "F" sends "m1" to "q"
    Then "m1" went to backlog queue 0
