Feature: Settlement outcomes: complete and abandon

  Background:
    Given a queue "q" with lock duration 5 seconds

  @SETTLE-COMP-001
  Scenario: A completed message is gone for good
    Given message "m1" is sent to "q"
    When receiver "A" on "q" receives 1 message
    And receiver "A" completes "m1"
    And 10 seconds pass
    And receiver "B" on "q" receives 1 message
    Then receiver "B" got no message
    And peeking "q" shows nothing

  @SETTLE-COMP-002
  Scenario: Completing twice is refused, not ignored
    Given message "m1" is sent to "q"
    When receiver "A" on "q" receives 1 message
    And receiver "A" completes "m1"
    And receiver "A" completes "m1"
    Then the operation fails with "message-lock-lost"

  @SETTLE-ABAN-001
  Scenario: Abandon makes the message available at once
    Given message "m1" is sent to "q"
    When receiver "A" on "q" receives 1 message
    And receiver "A" abandons "m1"
    And receiver "B" on "q" receives 1 message within 1 second
    Then receiver "B" got "m1" with delivery count 2
