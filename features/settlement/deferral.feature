@needs:deferral
Feature: Deferral
  Deferring is a settlement that sets the message aside until it is asked for by its
  sequence number.

  Background:
    Given a queue "q" with lock duration 5 seconds

  @SETTLE-DEFR-001
  Scenario: A deferred message is not returned by normal receives
    Given messages "m1", "m2" are sent to "q"
    When receiver "A" on "q" receives 1 message
    And receiver "A" defers "m1"
    And receiver "A" receives 5 messages
    Then receiver "A" got "m2"
    And receiver "A" receives 5 messages
    And receiver "A" got no message

  @SETTLE-DEFR-002
  Scenario: Any receiver can take a deferred message by its sequence number
    Given message "m1" is sent to "q"
    When receiver "A" on "q" receives 1 message
    And receiver "A" defers "m1"
    And receiver "B" on "q" receives the deferred message "m1"
    Then receiver "B" got "m1"
    And receiver "B" completes "m1"
    And the operation succeeds

  @SETTLE-DEFR-002
  Scenario: Asking for a sequence number that is not deferred fails
    Given message "m1" is sent to "q"
    When receiver "B" on "q" receives the deferred message "m1"
    Then the operation fails with "message-not-found"

  @SETTLE-DEFR-003
  Scenario: Completing a deferred message removes it; abandoning leaves it deferred
    Given messages "m1", "m2" are sent to "q"
    And receiver "A" on "q" defers every message it receives
    When receiver "B" on "q" receives the deferred message "m1"
    And receiver "B" completes "m1"
    And receiver "B" receives the deferred message "m2"
    And receiver "B" abandons "m2"
    And receiver "B" receives 1 message
    Then receiver "B" got no message
    And peeking "q" shows "m2" in state "deferred"
    And peeking "q" shows "m2"
    And receiver "B" receives the deferred message "m2"
    And receiver "B" got "m2" with delivery count 2

  @SETTLE-DEFR-004 @needs:time-to-live
  Scenario: Deferred messages are not purged when their time to live passes
    Given a queue "exp" with lock duration 5 seconds and dead-lettering on expiration
    And message "m1" with time to live 10 seconds is sent to "exp"
    When receiver "A" on "exp" receives 1 message
    And receiver "A" defers "m1"
    And 30 seconds pass
    Then peeking "exp/$DeadLetterQueue" shows nothing
    And peeking "exp" shows "m1" in state "deferred"

  @SETTLE-DEFR-005 @needs:time-to-live @needs:dead-letter
  Scenario: A deferred message asked for after its expiry is dead-lettered, not returned
    Given a queue "exp" with lock duration 5 seconds and dead-lettering on expiration
    And message "m1" with time to live 10 seconds is sent to "exp"
    When receiver "A" on "exp" receives 1 message
    And receiver "A" defers "m1"
    And 12 seconds pass
    And receiver "B" on "exp" receives the deferred message "m1"
    Then the operation fails with "message-not-found"
    And the dead-letter queue of "exp" holds "m1" with reason "TTLExpiredException"
    And receiver "B" receives the deferred message "m1"
    And the operation fails with "message-not-found"
