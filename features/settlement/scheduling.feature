@needs:scheduling
Feature: Scheduled messages

  Background:
    Given a queue "q"

  @SETTLE-SCHED-001 @needs:broker-clock
  Scenario: A scheduled message waits for its time
    When message "later" is scheduled on "q" in 10 seconds
    Then the scheduling returned a sequence number for "later"
    And receiver "A" on "q" receives 1 message within 5 seconds
    And receiver "A" got no message
    And receiver "A" receives 1 message within 10 seconds
    And receiver "A" got "later"

  @SETTLE-SCHED-001 @needs:broker-clock
  Scenario: Scheduling several messages returns a sequence number for each
    When messages "s1", "s2", "s3" are scheduled on "q" in 10 seconds
    Then the scheduling returned a sequence number for "s1"
    And the scheduling returned a sequence number for "s2"
    And the scheduling returned a sequence number for "s3"
    And the scheduled messages "s1", "s2", "s3" have different sequence numbers

  @SETTLE-SCHED-002 @needs:broker-clock
  Scenario: At its time a scheduled message gets a new sequence number
    When message "later" is scheduled on "q" in 10 seconds
    And message "now" is sent to "q"
    And 11 seconds pass
    And receiver "A" on "q" receives 2 messages
    Then receiver "A" got "now", "later"
    And "later" was received with a sequence number above the one its scheduling returned

  @SETTLE-SCHED-003 @needs:broker-clock
  Scenario: A cancelled scheduled message is never delivered
    When message "later" is scheduled on "q" in 10 seconds
    And the scheduled message "later" is cancelled
    And 11 seconds pass
    And receiver "A" on "q" receives 1 message
    Then receiver "A" got no message
    And peeking "q" shows nothing

  @SETTLE-SCHED-003
  Scenario: Cancelling an unknown sequence number fails
    When the scheduled message with sequence number 999 is cancelled on "q"
    Then the operation fails with "message-not-found"
