Feature: Pings
  A failed-over entity is pinged every PingPrimaryInterval until a ping is delivered; the
  broker never hands a ping to a receiver.

  Background:
    Given a queue "q"

  @PAIR-PING-001 @needs:entity-outage
  Scenario: A ping is an empty message with the ping content type and one second to live
    Given factory "F" paired with 1 backlog queue, failover interval 0 seconds and ping interval 5 seconds
    And the primary "q" becomes unavailable
    And factory "F" sends "m1" to "q"
    When the pairing runs for 15 seconds
    Then factory "F" pinged "q" 3 times
    And factory "F" pinged "q" every 5 seconds since its failover
    And every ping factory "F" sent is an empty message with content type "application/vnd.ms-servicebus-ping" and time to live 1 second

  @PAIR-PING-002
  Scenario: The broker never delivers a ping, in either receive mode
    Given messages "p1", "p2" with content type "application/vnd.ms-servicebus-ping" are sent to "q"
    And message "m1" is sent to "q"
    When receiver "L" on "q" receives 5 messages
    Then receiver "L" got "m1"
    Given message "p3" with content type "application/vnd.ms-servicebus-ping" is sent to "q"
    And receiver "D" on "q" in receive-and-delete mode
    When receiver "D" receives 5 messages
    Then receiver "D" got no message

  @PAIR-PING-002 @needs:topics
  Scenario: No subscription delivers a ping
    Given a topic "t" with subscriptions "s1", "s2"
    And message "p1" with content type "application/vnd.ms-servicebus-ping" is sent to "t"
    When receiver "A" on "t/Subscriptions/s1" receives 1 message
    And receiver "B" on "t/Subscriptions/s2" receives 1 message
    Then receiver "A" got no message
    And receiver "B" got no message

  @PAIR-PING-002 @PAIR-PING-004 @needs:paired-namespaces @needs:entity-outage @needs:sessions
  Scenario: A primary queue requiring sessions accepts the pings, never delivers them, and fails back
    Given a queue "sq" with sessions
    And factory "F" paired with 1 backlog queue, failover interval 0 seconds and ping interval 3 seconds
    And the primary "sq" becomes unavailable
    And factory "F" sends "m1" with session "s1" to "sq"
    And the primary "sq" recovers
    When the pairing runs for 3 seconds
    Then factory "F" pinged "sq" 1 time
    And the primary was billed 1 send of a ping to "sq"
    When factory "F" sends "m2" with session "s1" to "sq"
    Then "m2" went to the primary
    And the backlog queues hold "m1"
    When receiver "R" accepts the next available session on "sq"
    And receiver "R" receives 5 messages
    Then receiver "R" got "m2"

  @PAIR-PING-002 @needs:paired-namespaces @needs:entity-outage
  Scenario: The pings of a failed-over entity never reach its receivers
    Given factory "F" paired with 1 backlog queue, failover interval 0 seconds and ping interval 5 seconds
    And the primary "q" becomes unavailable
    And factory "F" sends "m1" to "q"
    And the pairing runs for 10 seconds
    And the primary "q" recovers
    When the pairing runs for 5 seconds
    Then factory "F" pinged "q" 3 times
    When factory "F" sends "m2" to "q"
    And receiver "R" on "q" receives 5 messages
    Then receiver "R" got "m2"

  @PAIR-PING-003 @needs:entity-outage @needs:virtual-time
  Scenario: By default a failed-over entity is pinged once a minute
    Given factory "F" paired with failover interval 0 seconds
    And the primary "q" becomes unavailable
    And factory "F" sends "m1" to "q"
    When the pairing runs for 5 minutes
    Then factory "F" pinged "q" at 1, 2, 3, 4, 5 minutes after its failover

  @PAIR-PING-003 @needs:entity-outage
  Scenario: Every failed-over entity of every factory is pinged, and only those
    Given a queue "r"
    And a queue "healthy"
    And factory "F" paired with 1 backlog queue, failover interval 0 seconds and ping interval 8 seconds
    And factory "G" paired with 1 backlog queue, failover interval 0 seconds and ping interval 12 seconds
    And the primary "q" becomes unavailable
    And the primary "r" becomes unavailable
    And factory "F" sends "m1" to "q"
    And factory "F" sends "m2" to "r"
    And factory "G" sends "m3" to "q"
    And factory "G" sends "m4" to "healthy"
    When the pairing runs for 17 seconds
    Then factory "F" pinged "q" every 8 seconds since its failover
    And factory "F" pinged "r" every 8 seconds since its failover
    And factory "G" pinged "q" every 12 seconds since its failover
    And factory "G" never pinged "r"
    And factory "G" never pinged "healthy"

  @PAIR-PING-004 @needs:entity-outage
  Scenario: The first successful ping sends new messages to the primary at once, for every sender
    Given factory "F" paired with 1 backlog queue, failover interval 0 seconds and ping interval 5 seconds
    And the primary "q" becomes unavailable
    And factory "F" sends "m1" to "q" through client "C1"
    And the pairing runs for 6 seconds
    And the primary "q" recovers
    When the pairing runs for 1 second
    And factory "F" sends "m2" to "q" through client "C2"
    Then "m2" went to a backlog queue
    When the pairing runs for 3 seconds
    And factory "F" sends "m3" to "q" through client "C2"
    And factory "F" sends "m4" to "q" through client "C1"
    Then "m3", "m4" went to the primary
    And peeking "q" shows "m3", "m4"
    And the backlog queues hold "m1", "m2"

  @PAIR-PING-005 @needs:entity-outage
  Scenario: Pings stop once the entity is available again, in seconds
    Given a queue "r"
    And factory "F" paired with 1 backlog queue, failover interval 0 seconds and ping interval 3 seconds
    And the primary "q" becomes unavailable
    And factory "F" sends "m1" to "q"
    And factory "F" sends "m2" to "r"
    And the pairing runs for 7 seconds
    And the primary "q" recovers
    When the pairing runs for 12 seconds
    Then factory "F" pinged "q" at 3, 6, 9 seconds after its failover
    And factory "F" never pinged "r"

  @PAIR-PING-005 @needs:entity-outage @needs:virtual-time
  Scenario: Pings stop once the entity is available again
    Given a queue "r"
    And factory "F" paired with failover interval 0 seconds and ping interval 5 seconds
    And the primary "q" becomes unavailable
    And factory "F" sends "m1" to "q"
    And factory "F" sends "m2" to "r"
    And the pairing runs for 12 seconds
    And the primary "q" recovers
    When the pairing runs for 10 minutes
    Then factory "F" pinged "q" at 5, 10, 15 seconds after its failover
    And factory "F" never pinged "r"

  @PAIR-PING-006 @needs:entity-outage
  Scenario: A ping the broker accepts is billed as one send, like any message
    Given factory "F" paired with 1 backlog queue, failover interval 0 seconds and ping interval 5 seconds
    And the primary "q" becomes unavailable
    And factory "F" sends "m1" to "q"
    And the pairing runs for 5 seconds
    And the primary "q" recovers
    When the pairing runs for 5 seconds
    Then factory "F" pinged "q" 2 times
    And the primary was billed 1 send of a ping to "q"
