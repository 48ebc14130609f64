@needs:paired-namespaces @needs:entity-outage
Feature: Messages rewritten to sit in a backlog queue
  SessionId, TimeToLive and ScheduledEnqueueTimeUtc are cleared and kept under aliases;
  the destination goes in x-ms-path (PAIR-DISC-001 for the scheduled time's alias).

  Background:
    Given a queue "q"
    And factory "F" paired with 1 backlog queue and failover interval 0 seconds
    And the primary "q" becomes unavailable

  @PAIR-RENAME-001
  Scenario: The session id moves to x-ms-sessionid
    When factory "F" sends "m1" with session "s1" to "q"
    And factory "F" sends "m2" to "q"
    Then the backlog copy of "m1" has no session id and property "x-ms-sessionid" = "s1"
    And the backlog copy of "m2" has no session id and no property "x-ms-sessionid"

  @PAIR-RENAME-002 @needs:time-to-live @needs:virtual-time
  Scenario: The time to live moves to x-ms-timetolive, and the backlog copy does not expire
    When factory "F" sends "m1" with time to live 30 seconds to "q"
    Then the backlog copy of "m1" has no time to live and property "x-ms-timetolive" = 30 seconds
    And the backlog copy of "m1" never expires
    When 600 seconds pass
    Then the backlog queues hold "m1"

  @PAIR-RENAME-002 @needs:time-to-live
  Scenario: The time to live moves to x-ms-timetolive, and the backlog copy outlives it
    When factory "F" sends "m1" with time to live 2 seconds to "q"
    Then the backlog copy of "m1" has no time to live and property "x-ms-timetolive" = 2 seconds
    And the backlog copy of "m1" never expires
    When 4 seconds pass
    Then the backlog queues hold "m1"

  @PAIR-RENAME-003 @needs:scheduling
  Scenario: The scheduled enqueue time moves to x-ms-scheduledenqueuetimeutc
    When factory "F" sends "m1" with scheduled enqueue time in 120 seconds to "q"
    Then the backlog copy of "m1" has no scheduled enqueue time and property "x-ms-scheduledenqueuetimeutc" = its send time plus 120 seconds
    And the backlog copy of "m1" is in state "active"
    And the backlog copy of "m1" has no property "x-ms-sessionid" and no property "x-ms-timetolive"

  @PAIR-RENAME-004 @needs:topics
  Scenario: Messages for several entities share a backlog queue, each naming its destination
    Given a topic "t" with subscriptions "s"
    And the primary "t" becomes unavailable
    When factory "F" sends "m1" to "q"
    And factory "F" sends "m2" to "t"
    Then backlog queue 0 holds "m1", "m2"
    And the backlog copy of "m1" has property "x-ms-path" naming "q"
    And the backlog copy of "m2" has property "x-ms-path" naming "t"

  @PAIR-SIZE-001
  Scenario: A message that fits the primary but not the backlog fails with a size error, and nothing is lost
    Given a queue "direct"
    And a queue "an-entity-with-a-long-name-so-that-its-x-ms-path-adds-bytes"
    And factory "F" sends "fits" with a body that fills the 256 KB limit to "direct"
    And "fits" went to the primary
    And the primary "an-entity-with-a-long-name-so-that-its-x-ms-path-adds-bytes" becomes unavailable
    When factory "F" sends "big" with a body that fills the 256 KB limit to "an-entity-with-a-long-name-so-that-its-x-ms-path-adds-bytes"
    Then the operation fails with "message-size-exceeded"
    And the backlog queues hold nothing
    When factory "F" sends "small" to "q"
    Then "small" went to backlog queue 0
    And the backlog queues hold "small"
    And factory "F" has backlog queues 0 in rotation
