Feature: Peek (browse)

  Background:
    Given a queue "q" with lock duration 5 seconds

  @SETTLE-PEEK-001
  Scenario: Peeking locks nothing
    Given messages "m1", "m2" are sent to "q"
    When peeking "q" shows "m1", "m2"
    And receiver "A" on "q" receives 2 messages
    Then receiver "A" got "m1", "m2" with delivery count 1

  @SETTLE-PEEK-002
  Scenario: Peek starts at a sequence number and returns at most the count asked for
    Given messages "m1", "m2", "m3", "m4" are sent to "q"
    When peeking 2 messages of "q" from the sequence number of "m2"
    Then the peek shows "m2", "m3", or fewer of them from the first

  @SETTLE-PEEK-003 @needs:deferral @needs:scheduling @needs:broker-clock
  Scenario: Peek shows locked, deferred and scheduled messages, each with its state
    Given messages "m1", "m2", "m3" are sent to "q"
    And message "later" is scheduled on "q" in 60 seconds
    When receiver "A" on "q" receives 1 message
    And receiver "A" receives 1 message
    And receiver "A" defers "m2"
    Then peeking "q" shows "m1", "m2", "m3", "later"
    And peeking "q" shows "m1" in state "active"
    And peeking "q" shows "m2" in state "deferred"
    And peeking "q" shows "later" in state "scheduled"

  @SETTLE-PEEK-003 @needs:topics @needs:scheduling @needs:broker-clock
  Scenario: Peeking a subscription does not show scheduled messages
    Given a topic "t" with subscriptions "s1" and "s2"
    And message "now" is sent to "t"
    And message "later" is scheduled on "t" in 60 seconds
    Then peeking "t/Subscriptions/s1" shows "now"

  @SETTLE-PEEK-004 @needs:time-to-live
  Scenario: Peek may or may not still show an expired message
    Given message "old" with time to live 5 seconds is sent to "q"
    And message "new" is sent to "q"
    When 10 seconds pass
    Then peeking "q" shows "new", and "old" may also appear
    And receiver "A" on "q" receives 5 messages
    And receiver "A" got "new"
