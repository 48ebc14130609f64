@needs:dead-letter
Feature: The dead-letter subqueue

  Background:
    Given a queue "q" with lock duration 5 seconds

  @SETTLE-DLQ-002 @SETTLE-DLQ-001
  Scenario: Dead-lettering keeps the receiver's reason and description
    Given message "m1" is sent to "q"
    When receiver "A" on "q" receives 1 message
    And receiver "A" dead-letters "m1" with reason "BadFormat" and description "field x missing"
    And receiver "D" on "q/$DeadLetterQueue" receives 1 message
    Then receiver "D" got "m1"
    And receiver "D" got "m1" with reason "BadFormat" and description "field x missing"
    And peeking "q" shows nothing

  @SETTLE-DLQ-001
  Scenario: The dead-letter subqueue supports peek-lock and receive-and-delete
    Given messages "m1", "m2" are sent to "q"
    And receiver "A" on "q" dead-letters every message it receives
    And receiver "L" on "q/$DeadLetterQueue"
    And receiver "X" on "q/$DeadLetterQueue" in receive-and-delete mode
    When receiver "L" receives 1 message
    And receiver "L" abandons "m1"
    And receiver "L" receives 1 message
    And receiver "L" completes "m1"
    And receiver "X" receives 5 messages
    Then receiver "X" got "m2"
    And peeking "q/$DeadLetterQueue" shows nothing

  @SETTLE-DLQ-003 @needs:time-to-live
  Scenario: Dead-lettered messages do not expire
    Given message "m1" with time to live 10 seconds is sent to "q"
    When receiver "A" on "q" receives 1 message
    And receiver "A" dead-letters "m1" with reason "r" and description "d"
    And 30 seconds pass
    Then peeking "q/$DeadLetterQueue" shows "m1"
    When receiver "D" on "q/$DeadLetterQueue" receives 1 message
    Then receiver "D" got "m1"

  @SETTLE-DLQ-004
  Scenario: A dead-lettered message cannot be dead-lettered again
    Given message "m1" is sent to "q"
    And receiver "A" on "q" dead-letters every message it receives
    When receiver "D" on "q/$DeadLetterQueue" receives 1 message
    And receiver "D" dead-letters "m1" with reason "again" and description "again"
    Then the operation fails with "invalid-operation"

  @SETTLE-FWD-002 @needs:entity-management @needs:auto-forward
  Scenario: A queue forwarding its dead letters sends them, with their reason, to the other entity
    Given a queue "sink" with lock duration 5 seconds
    And a queue "src" forwarding its dead letters to "sink" with lock duration 5 seconds
    And message "m1" is sent to "src"
    When receiver "A" on "src" receives 1 message
    And receiver "A" dead-letters "m1" with reason "Bad" and description "bad input"
    Then peeking "src/$DeadLetterQueue" shows nothing, or is refused
    And receiver "B" on "sink" receives 1 message
    And receiver "B" got "m1" with reason "Bad" and description "bad input"
    And receiver "B" got "m1" with the dead-letter source "src"
