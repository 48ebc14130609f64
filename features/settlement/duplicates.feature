Feature: Duplicate messages and message ids

  @SETTLE-DUP-002 @needs:duplicate-detection
  Scenario: A duplicate within the window is accepted but dropped
    Given a queue "q" with duplicate detection window 30 seconds
    When message "m1" is sent to "q"
    And message "m1" is sent to "q"
    Then the operation succeeds
    And receiver "A" on "q" receives 5 messages
    And receiver "A" got "m1"
    And receiver "A" receives 5 messages
    And receiver "A" got no message

  @SETTLE-DUP-002 @SETTLE-SCHED-001 @needs:duplicate-detection @needs:scheduling @needs:broker-clock
  Scenario: A duplicate scheduled within the window is answered with a sequence number but dropped
    Given a queue "q" with duplicate detection window 30 seconds
    When message "m1" is scheduled on "q" in 5 seconds
    And message "m1" is scheduled on "q" in 5 seconds
    Then the operation succeeds
    And 6 seconds pass
    And receiver "A" on "q" receives 5 messages
    And receiver "A" got "m1"
    And receiver "A" receives 5 messages
    And receiver "A" got no message

  @SETTLE-DUP-003 @needs:duplicate-detection
  Scenario: After the window the same id is a new message
    Given a queue "q" with duplicate detection window 30 seconds
    When message "m1" is sent to "q"
    And 31 seconds pass
    And message "m1" is sent to "q"
    Then peeking "q" shows "m1", "m1"

  @SETTLE-DUP-004
  Scenario: Without duplicate detection both copies are delivered
    Given a queue "q"
    When message "m1" is sent to "q"
    And message "m1" is sent to "q"
    Then peeking "q" shows "m1", "m1"
