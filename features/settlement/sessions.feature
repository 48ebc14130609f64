@needs:sessions
Feature: Sessions

  Background:
    Given a queue "sq" with lock duration 5 seconds and sessions

  @SETTLE-SESS-001
  Scenario: A session queue refuses a message without a session id
    When message "m1" is sent to "sq"
    Then the operation fails with "invalid-operation"

  @SETTLE-SESS-001
  Scenario: A session queue cannot be received from without a session
    Given message "m1" with session "s1" is sent to "sq"
    When receiver "A" on "sq" receives 1 message
    Then the operation fails with "invalid-operation"

  @SETTLE-SESS-002
  Scenario: A session is locked by one receiver at a time
    Given message "m1" with session "s1" is sent to "sq"
    When receiver "A" accepts session "s1" on "sq"
    And receiver "B" accepts session "s1" on "sq"
    Then the operation fails with "session-cannot-be-locked"

  @SETTLE-SESS-003
  Scenario: A session's messages come in order; an abandoned one comes first again
    Given messages "a1", "a2", "a3" with session "s1" are sent to "sq"
    When receiver "A" accepts session "s1" on "sq"
    And receiver "A" receives 1 message
    And receiver "A" abandons "a1"
    And receiver "A" receives 3 messages
    Then receiver "A" got "a1", "a2", "a3"

  @SETTLE-SESS-004
  Scenario: The next available session is one that has messages and is not locked
    Given message "x1" with session "x" is sent to "sq"
    And message "y1" with session "y" is sent to "sq"
    When receiver "A" accepts session "x" on "sq"
    And receiver "B" accepts the next available session on "sq"
    Then receiver "B" holds session "y"
    And receiver "C" accepts the next available session on "sq"
    And the operation fails with "timeout"

  @SETTLE-SESS-005
  Scenario: Session state starts empty and outlives the session lock
    Given message "m1" with session "s1" is sent to "sq"
    When receiver "A" accepts session "s1" on "sq"
    Then the session state seen by "A" is empty
    And receiver "A" sets the session state to "step-2"
    And receiver "A" closes
    And receiver "B" accepts session "s1" on "sq"
    And the session state seen by "B" is "step-2"

  @SETTLE-SESS-008
  Scenario: A session state holds at most one message's size
    Given message "m1" with session "s1" is sent to "sq"
    When receiver "A" accepts session "s1" on "sq"
    And receiver "A" sets a session state of 300 KB
    Then the operation is refused
    And the session state seen by "A" is empty
    And receiver "A" sets the session state to "small"
    And the session state seen by "A" is "small"

  @SETTLE-SESS-009 @needs:time-to-live
  Scenario: A message expiring in a session expires every message of the session
    Given message "short" with session "s1" and time to live 5 seconds is sent to "sq"
    And message "long" with session "s1" is sent to "sq"
    And message "other" with session "s2" is sent to "sq"
    When 10 seconds pass
    And receiver "A" accepts session "s1" on "sq"
    And receiver "A" receives 5 messages
    Then receiver "A" got no message
    And receiver "B" accepts session "s2" on "sq"
    And receiver "B" receives 5 messages
    And receiver "B" got "other"

  @SETTLE-SESS-006 @needs:broker-clock
  Scenario: Renewing the session lock extends it; an expired one is lost
    Given message "m1" with session "s1" is sent to "sq"
    When receiver "A" accepts session "s1" on "sq"
    And receiver "A" receives 1 message
    And 3 seconds pass
    And receiver "A" renews its session lock
    Then the session lock of "A" is held until 5 seconds after the renewal
    And 6 seconds pass
    And receiver "A" renews its session lock
    And the operation fails with "session-lock-lost"
    And receiver "A" completes "m1"
    And the operation fails with "session-lock-lost"

  @SETTLE-SESS-007
  Scenario: An expired session lock frees the session and counts a delivery
    Given message "m1" with session "s1" is sent to "sq"
    When receiver "A" accepts session "s1" on "sq"
    And receiver "A" receives 1 message
    And 6 seconds pass
    And receiver "A" completes "m1"
    Then the operation fails with "session-lock-lost"
    And receiver "B" accepts session "s1" on "sq"
    And receiver "B" receives 1 message
    And receiver "B" got "m1" with delivery count 2

  @SETTLE-SESS-007
  Scenario: Closing a session receiver releases its messages without counting a delivery
    Given message "m1" with session "s1" is sent to "sq"
    When receiver "A" accepts session "s1" on "sq"
    And receiver "A" receives 1 message
    And receiver "A" closes
    And receiver "B" accepts session "s1" on "sq"
    And receiver "B" receives 1 message
    Then receiver "B" got "m1" with delivery count 1
